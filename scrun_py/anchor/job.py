"""The container's job and step, as the lifecycle drives them through the Slurm backend:
allocate, ask about the job, launch and watch the step, signal it, end the job.

No phase changes here: `anchor/lifecycle.py` decides what happens next.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from scrun_py.anchor.supervised import SupervisedContainer
from scrun_py.anchor.table import FATAL_BY_DEFAULT
from scrun_py.base import procs, threads
from scrun_py.base.errors import AllocationFailed, ScrunError, SlurmError
from scrun_py.base.signames import SIGKILL
from scrun_py.base.threads import Cancel
from scrun_py.container import spool
from scrun_py.slurm.backend import Allocation, AllocRequest, SlurmBackend, Step, StepRequest
from scrun_py.slurm.options import JobOptions

RELEASE_TIMEOUT_S = 60.0
STEP_RETRY_S = 60.0  # slurmctld restarting while srun creates the step
STEP_RETRY_PAUSE_S = 1.0
PENDING = "PENDING"
# a queued job's reason is asked again this often while it waits (it changes: Priority,
# then Resources); each time is one squeue
PENDING_REFRESH_S = 30.0
# a job slurmctld has just queued can show no reason ("None") until its scheduler has
# looked at it: asked again this often, up to this many times, before it is reported
REASON_RETRY_S = 0.5
REASON_ATTEMPTS = 6
NO_REASON = ("", "None")


def _rootfs_problem(bundle: str, release: str) -> str:
    """oci/bundle.py bundle_rootfs_problem, imported only on a Slurm that needs it (the
    backend calls this only there).  It reads config.json again, at `start`: scrun.lua's
    stage_in may have moved the bundle (set_bundle_path) or rewritten its config since
    `create` read it."""
    from scrun_py.oci.bundle import bundle_rootfs_problem

    return bundle_rootfs_problem(bundle, release)


class Job:
    def __init__(self, container: SupervisedContainer, backend: SlurmBackend, job_opts: JobOptions,
                 alloc_timeout_s: float | None) -> None:
        self.container = container
        self.backend = backend
        self.job_opts = job_opts
        self.alloc_timeout_s = alloc_timeout_s
        self.alloc: Allocation | None = None
        self.step: Step | None = None
        self._relaunching = False  # between a step srun could not create and the next
        self._signal_while_relaunching = 0
        self._asking_step_id = threading.Lock()
        self.pending_refresh_s = PENDING_REFRESH_S
        self.reason_retry_s = REASON_RETRY_S
        self._wait_over = Cancel()  # the allocation was granted, failed or withdrawn
        self._wait_notes = threading.Lock()  # the pending watch's annotations vs the grant's

    # ---- the job -----------------------------------------------------------------------------
    def allocate(self, cancel: Cancel) -> Allocation:
        """A new job, or the running job named by SLURM_JOB_ID; Cancelled once `cancel`
        is set (a job requested is cancelled)."""
        container, rec = self.container, self.container.record
        existing = container.environ.get("SLURM_JOB_ID", "")
        container.event("allocation started")
        if existing:
            if not existing.isdigit():
                raise AllocationFailed(f"SLURM_JOB_ID is not a job id: {existing!r}")
            rec.job_id, rec.owns_job = int(existing), False
            self.alloc = threads.call(
                lambda: self.backend.attach(int(existing), dict(container.environ)), cancel,
                "scrun-attach")
        else:
            def on_job_id(job_id: int) -> None:
                rec.job_id = job_id
                container.save()

            def on_pending(job_id: int) -> None:
                threads.spawn(lambda: self._watch_pending(job_id), "scrun-pending",
                              lambda exc: container.log.error(
                                  "anchor task failed", task="pending", exc_info=exc))

            try:
                self.alloc = self.backend.allocate(AllocRequest(
                    self.job_opts.alloc, {**container.environ, **self.job_opts.env}, on_job_id,
                    self.alloc_timeout_s, str(container.abandon_script()), on_pending),
                    cancel)
            finally:
                with self._wait_notes:
                    self._wait_over.set()
                    container.clear_job_wait()  # saved below, or removed with the create
            rec.job_id = self.alloc.job_id
        container.save()
        container.event("allocation granted")
        return self.alloc

    def _watch_pending(self, job_id: int) -> None:
        """Slurm queued the job instead of granting it at once: say why in --log, once on
        create's terminal, and in state's annotations, kept current until the
        allocation's wait is over."""
        over = self._wait_over
        info = self.backend.job_state(job_id)
        for _ in range(REASON_ATTEMPTS - 1):
            if info is None or info.state != PENDING or info.reason not in NO_REASON:
                break
            if not over.sleep(self.reason_retry_s):
                break
            info = self.backend.job_state(job_id)
        reason = info.reason if info is not None else ""
        self.container.event("job allocation pending", reason=reason or None,
                             job_state=info.state if info is not None else None)
        with self._wait_notes:
            if over.is_set() or (info is not None and info.state != PENDING):
                return  # granted meanwhile
            self.container.note_job_wait(PENDING, reason)
        self.container.tell_terminal(f"pending job allocation {job_id}" + (
            f" (reason: {reason})" if reason not in NO_REASON else ""))
        while over.sleep(self.pending_refresh_s):
            info = self.backend.job_state(job_id)
            if (info is None or info.state != PENDING or info.reason == reason
                    or info.reason in NO_REASON):
                continue
            reason = info.reason
            with self._wait_notes:
                if over.is_set():
                    return
                self.container.note_job_wait(PENDING, reason)
            self.container.event("job allocation still pending", reason=reason)

    def info(self, alloc: Allocation) -> tuple[float | None, int, int]:
        """The job's end time (owned jobs: for the time-limit watch) and uid/gid (rootless
        engines run us as uid 0 in a user namespace), asked only when one is needed."""
        uid, gid = os.getuid(), os.getgid()
        userns = procs.in_user_namespace()
        if not alloc.owned and not userns:
            return None, uid, gid
        info = self.backend.job_info(alloc.job_id)
        if info is None:
            return None, uid, gid
        if userns and info.uid is not None and info.gid is not None:
            uid, gid = info.uid, info.gid
        return (info.end_time if alloc.owned else None), uid, gid

    def end(self, code: int) -> None:
        """End an owned job with the container's exit code; leave an existing one running."""
        container, alloc = self.container, self.alloc
        if alloc is None:
            if container.record.job_id and container.record.owns_job:  # allocation cut short
                self.backend.cancel(container.record.job_id)
            return
        if not alloc.owned:
            container.event("existing allocation left running")
            return
        container.event("job end started")
        try:
            self.backend.release(alloc, code, RELEASE_TIMEOUT_S)
        except SlurmError as exc:
            container.log.error("ending the job failed", error=str(exc), job_id=alloc.job_id)
        container.event("job end finished")

    # ---- the step ----------------------------------------------------------------------------
    def launch(self) -> Step:
        """Start the container step with the caller's stdio (stderr through the relay)
        or the pty; raises ScrunError."""
        container, alloc = self.container, self.alloc
        assert alloc is not None
        req = StepRequest(
            job_id=alloc.job_id, container_id=container.record.id,
            bundle=container.ctx.bundle if container.ctx else str(container.bundle.path),
            args=container.bundle.config.process.args, env=container.job_env(alloc),
            step_opts=self.job_opts.step, pty_slave=container.pty_slave,
            pty=container.pty_slave is not None or (container.bundle.config.process.terminal
                                                    and os.isatty(0)),
            stdio=(0, 1, 2), rootfs_problem=_rootfs_problem)
        container.event("launch started")
        self.step = self.backend.launch_step(req)
        if container.pty_slave is not None:
            os.close(container.pty_slave)
            container.pty_slave = None
        return self.step

    def wait_step(self, step: Step, check_revoked: bool,
                        may_relaunch: Callable[[], bool] = lambda: False) -> int:
        """The container's exit code once its step has exited.  A step srun could not
        create because slurmctld did not answer (the container never ran) is launched
        again for up to STEP_RETRY_S, while `may_relaunch()` and no signal came."""
        deadline = time.monotonic() + STEP_RETRY_S
        while True:
            outcome = step.wait()
            assert outcome is not None
            code = procs.exit_code(outcome.returncode)
            if not (code and outcome.retry
                    and time.monotonic() < deadline and may_relaunch()):
                break
            self.container.event("step not created, launching it again", reason=outcome.not_created)
            self._relaunching = True
            time.sleep(STEP_RETRY_PAUSE_S)
            self._relaunching = False
            if self._signal_while_relaunching or not may_relaunch():
                break
            try:
                step = self.launch()
            except ScrunError as exc:
                self.container.event("relaunch failed", error=str(exc))
                break
        if self._signal_while_relaunching:  # the container never ran: as a kill before start
            code = 128 + self._signal_while_relaunching
        alloc = self.alloc
        if code == 0 and check_revoked and alloc and self.backend.revoked(alloc):
            # the job ended underneath a running step (scancel, node failure): srun gives
            # up waiting for the task and exits 0, but the container did not finish;
            # report it as killed, like Slurm did
            code = 128 + SIGKILL
            self.container.event("job ended while the container ran", stderr=alloc.messages[-3:])
        self.container.event("step finished", exit_code=code)
        return code

    def step_alive(self) -> bool:
        return self.step is not None and self.step.returncode is None

    def step_id(self) -> int | None:
        """The step's id, asked once (the signal and the abandon script both need it)."""
        rec = self.container.record
        with self._asking_step_id:
            if rec.step_id is None and self.alloc is not None:
                rec.step_id = self.backend.step_id(self.alloc.job_id, self.step_alive)
                self.container.save()
        return rec.step_id

    def signal(self, sig: int) -> None:
        """Signal the container's init, if its step runs (signal 0: nothing to do)."""
        alloc = self.alloc
        if sig and self._relaunching and sig in FATAL_BY_DEFAULT:
            self._signal_while_relaunching = sig
        if sig == 0 or alloc is None or not self.step_alive():
            return
        step_id = self.step_id()
        self.backend.signal(alloc.job_id, step_id, sig, self.container.job_env(alloc),
                                  self.step_alive)
        self.container.event("signal delivered", signal=sig, step_id=step_id)

    def step_exits_within(self, seconds: float) -> bool:
        return self.step is None or self.step.wait(seconds) is not None

    def kill(self, grace_s: float) -> None:
        """SIGKILL through the runtime; after `grace_s`, cancel the step and kill srun."""
        self.signal(SIGKILL)
        if not self.step_exits_within(grace_s) and self.alloc and self.step:
            self.backend.cancel(self.alloc.job_id, self.container.record.step_id)
            with contextlib.suppress(ProcessLookupError):
                self.step.kill()

    def write_abandon_script(self) -> None:
        """What the allocation holder runs if this anchor dies: SIGKILL the container
        through the runtime (the backend writes the command)."""
        alloc = self.alloc
        if alloc is None or not alloc.owned:
            return
        step_id = self.step_id()
        script = (self.backend.abandon_script(alloc, step_id)
                  if step_id is not None else None)
        if script is not None:
            with contextlib.suppress(OSError):
                spool.write_atomic(self.container.abandon_script(), script.encode(), 0o700)
