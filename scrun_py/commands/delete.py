"""`delete [--force] [--regex] ID`: tear the container down and remove every trace of it.

A directory without a record and without an anchor socket is what a create that failed
half-way leaves: it is removed when it holds only what scrun-py puts there, and with
--force an id that is not there at all is a success (what runc does).  A container
whose anchor runs is deleted by the anchor (it ends the step and the job); one whose
anchor died is cleaned up here.  A directory is never removed under a live anchor: one
that neither answers nor exits is killed (SIGKILL, its job cancelled) and waited for,
and when it still runs delete fails and keeps the directory.
"""

from __future__ import annotations

import os
import time

from scrun_py.base.callerpath import remove_pid_file
from scrun_py.base.errors import (
    AnchorUnreachable,
    ContainerNotFound,
    ContainerStillRunning,
    ScrunError,
)
from scrun_py.base.layout import RUNNING, STOPPED
from scrun_py.commands import audit
from scrun_py.container.handle import Container
from scrun_py.container.record import ContainerRecord

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.base.invocation import Invocation

ANCHOR_EXIT_WAIT_S = 15.0
#: how long delete waits for an anchor it has killed to be gone
KILLED_EXIT_WAIT_S = 5.0


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
        if not _wait_anchor_exit(record, ANCHOR_EXIT_WAIT_S):
            if not force and status == RUNNING:
                raise ContainerStillRunning(container.id)  # alive, yet it does not answer
            _kill_anchor(container, record)
    else:
        _clean_after_dead_anchor(record)
    if record.pid_file and record.reported_pid:
        remove_pid_file(record.pid_file, record.reported_pid)
    _owed_stage_out(inv, container)
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


def _wait_anchor_exit(record: ContainerRecord, timeout_s: float) -> bool:
    """Whether the record's anchor is gone (a zombie is), waiting up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while Container.anchor_alive(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _kill_anchor(container: Container, record: ContainerRecord) -> None:
    """The anchor runs, yet it did not answer and did not exit: SIGKILL it, cancel its
    job, and wait for it to be gone.  ScrunError, the directory kept, when it cannot be
    killed or still runs after KILLED_EXIT_WAIT_S."""
    pid = record.anchor_pid
    try:
        _sigkill(record)
    except OSError as exc:
        raise ScrunError(f"container anchor (pid {pid}) does not answer and cannot be "
                         f"killed: {exc.strerror or exc}: keeping {container.dir}") from None
    _clean_after_dead_anchor(record)
    if not _wait_anchor_exit(record, KILLED_EXIT_WAIT_S):
        raise ScrunError(f"container anchor (pid {pid}) does not answer and still runs "
                         f"{KILLED_EXIT_WAIT_S:g} s after SIGKILL: keeping {container.dir}")


def _sigkill(record: ContainerRecord) -> None:
    """SIGKILL the anchor the record names, if it still runs.  Its start time is checked
    through a pidfd opened first, so that a process given its pid in between is never
    the one signalled (os.kill after the check where there is no pidfd)."""
    import signal

    from scrun_py.base.signames import SIGKILL

    try:
        pidfd = os.pidfd_open(record.anchor_pid)
    except ProcessLookupError:
        return  # gone
    except OSError:  # no pidfd (a kernel before 5.3, a seccomp filter)
        if Container.anchor_alive(record):
            os.kill(record.anchor_pid, SIGKILL)
        return
    try:
        if Container.anchor_alive(record):
            signal.pidfd_send_signal(pidfd, SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(pidfd)


def _owed_stage_out(inv: Invocation, container: Container) -> None:
    """The anchor is gone: if it died before its stage_out (SIGKILL from an engine), run
    that stage_out now (hooks/owed.py), so that a staged copy of the rootfs goes with
    the container."""
    from scrun_py.base.layout import STAGE_OUT_FILE

    if not os.path.lexists(os.path.join(container.dir, STAGE_OUT_FILE)):
        return
    from scrun_py.hooks import owed

    owed.run_owed(str(container.dir), owed.NoteLog(inv.note))


def _clean_after_dead_anchor(record: ContainerRecord) -> None:
    """The anchor died without finishing (e.g. SIGKILL): end its job ourselves."""
    if record.status == STOPPED or not record.job_id or not record.owns_job:
        return
    from scrun_py.slurm.cancel import cancel_job

    cancel_job(record.job_id)
