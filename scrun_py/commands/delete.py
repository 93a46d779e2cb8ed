"""`delete [--force] [--regex] ID`: tear the container down and remove every trace of it.

A directory without a record and without an anchor socket is what a create that failed
half-way leaves: it is removed when it holds only what scrun-py puts there, and with
--force an id that is not there at all is a success (what runc does).  A container
whose anchor runs is deleted by the anchor (it ends the step and the job); one whose
anchor died is cleaned up here.
"""

from __future__ import annotations

import time

from scrun_py.base.errors import (
    AnchorUnreachable,
    ContainerNotFound,
    ContainerStillRunning,
    ScrunError,
)
from scrun_py.base.layout import RUNNING, STOPPED
from scrun_py.commands import audit
from scrun_py.container.handle import Container, ContainerRecord, remove_pid_file

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.base.invocation import Invocation

ANCHOR_EXIT_WAIT_S = 15.0


def run(inv: Invocation, container_id: str, force: bool) -> None:
    with Container(inv.root_dir, container_id) as container:
        _delete(inv, container, force)


def _delete(inv: Invocation, container: Container, force: bool) -> None:
    """delete acts (scancel of the record's job, removal of its pid file and of the
    directory) only on what the handle has checked: a root and a container directory
    of the caller's that nobody else can write, a record that is a regular file of the
    caller's; a symlink is never followed."""
    try:
        record = container.record()
    except ContainerNotFound:
        if container.exists() and not container.has_socket():
            foreign = container.foreign_content()
            if foreign:
                raise ScrunError(f"{container.dir} has no container record and holds "
                                 f"what scrun-py does not make ({foreign}): not removing it"
                                 ) from None
            container.remove()
            return
        if force:
            return
        raise
    status = container.status(record)
    if status != STOPPED:
        # The anchor decides from its own phase (state.json may lag behind it): without
        # --force it refuses a running container with runc's words, and kills and
        # deletes a created one, as runc does.
        try:
            container.request("delete", None, force=force)
        except AnchorUnreachable:
            pass
        _wait_anchor_exit(record)
        if not force and status == RUNNING and container.anchor_alive(record):
            raise ContainerStillRunning(container.id)  # alive, yet it does not answer
    else:
        _clean_after_dead_anchor(record)
    if record.pid_file and record.anchor_pid:
        remove_pid_file(record.pid_file, record.anchor_pid)
    container.remove()
    audit(inv, "delete", container_id=container.id, job_id=record.job_id or None,
          bundle=record.bundle, force=force)


def run_matching(inv: Invocation, pattern: str, force: bool) -> None:
    """crun's `delete --regex`: delete every container whose id matches; a container
    that fails is a warning on stderr, not a failure of the command."""
    from scrun_py.container import spool

    for container_id in spool.matching_ids(inv.root_dir, pattern):
        try:
            run(inv, container_id, force)
        except ScrunError as exc:
            inv.note("warning", f"delete {container_id}: {exc}", container_id=container_id)


def _wait_anchor_exit(record: ContainerRecord) -> None:
    deadline = time.monotonic() + ANCHOR_EXIT_WAIT_S
    while Container.anchor_alive(record) and time.monotonic() < deadline:
        time.sleep(0.02)


def _clean_after_dead_anchor(record: ContainerRecord) -> None:
    """The anchor died without finishing (e.g. SIGKILL): end its job ourselves."""
    if record.status == STOPPED or not record.job_id or not record.owns_job:
        return
    from scrun_py.slurm.cancel import cancel_job

    cancel_job(record.job_id)
