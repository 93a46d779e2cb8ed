"""`delete [--force] ID`: tear the container down and remove every trace of it."""

from __future__ import annotations

import time
from pathlib import Path

from scrun_py import audit, client, spool, store
from scrun_py.errors import (
    AnchorUnreachable,
    ContainerNotFound,
    ContainerStillRunning,
    ScrunError,
)
from scrun_py.settings import Invocation
from scrun_py.status import Status

ANCHOR_EXIT_WAIT_S = 15.0


def run(inv: Invocation, container_id: str, force: bool) -> None:
    cdir = spool.container_dir(inv.root, container_id)
    try:
        record = store.load(inv.root, container_id)
    except ContainerNotFound:
        # runc delete.go: a half-created dir is removed; with --force that is success.
        if cdir.is_dir() and not (cdir / spool.SOCKET_NAME).exists():
            spool.remove_tree(cdir)
            return
        if force:
            return
        raise
    _check_owner(cdir)
    status = store.effective_status(record)
    if status is not Status.STOPPED:
        # The anchor decides from its own phase (state.json may lag behind it): without
        # --force it refuses a running container with runc's words, and kills and
        # deletes a created one, as runc does.
        try:
            client.request(inv.root, container_id, "delete", timeout_s=None, force=force)
        except AnchorUnreachable:
            pass
        _wait_anchor_exit(record)
        if not force and status is Status.RUNNING and store.anchor_alive(record):
            raise ContainerStillRunning(container_id)  # alive, yet it does not answer
    else:
        _clean_after_dead_anchor(inv, record)
    if record.pid_file and record.anchor_pid:
        spool.remove_pid_file(Path(record.pid_file), record.anchor_pid)
    spool.remove_tree(cdir)
    audit.emit(inv.slurm_conf_path(), "delete", container_id=container_id,
               job_id=record.job_id or None, bundle=record.bundle, force=force)


def run_matching(inv: Invocation, pattern: str, force: bool) -> None:
    """crun's `delete --regex`: delete every container whose id matches; a container
    that fails is a warning on stderr, not a failure of the command."""
    for container_id in spool.matching_ids(inv.root, pattern):
        try:
            run(inv, container_id, force)
        except ScrunError as exc:
            inv.note("warning", f"delete {container_id}: {exc}", container_id=container_id)


def _check_owner(cdir: Path) -> None:
    """delete acts on what state.json records (scancel of its job, removal of its pid
    file): only on a record in a directory of the caller's that nobody else can write."""
    import os

    from scrun_py.errors import PermissionDenied

    for path, what in ((cdir, "container directory"),
                       (cdir / spool.STATE_FILE, "container state file")):
        try:
            owner = os.stat(path).st_uid
        except OSError:
            owner = -1
        if owner != os.geteuid():  # the anchor's words for another user's container
            raise PermissionDenied("permission denied: container belongs to another user")
        try:
            spool.check_private(path, what)
        except ScrunError as exc:
            raise PermissionDenied(f"permission denied: {exc}") from None


def _wait_anchor_exit(record: store.ContainerRecord) -> None:
    deadline = time.monotonic() + ANCHOR_EXIT_WAIT_S
    while store.anchor_alive(record) and time.monotonic() < deadline:
        time.sleep(0.02)


def _clean_after_dead_anchor(inv: Invocation, record: store.ContainerRecord) -> None:
    """The anchor died without finishing (e.g. SIGKILL): end its job ourselves."""
    if record.status == Status.STOPPED.value or not record.job_id or not record.owns_job:
        return
    from scrun_py import procs
    from scrun_py.slurm.argv import build_scancel_argv

    procs.run(build_scancel_argv(record.job_id), timeout_s=30)
