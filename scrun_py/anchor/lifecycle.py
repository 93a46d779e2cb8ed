"""The anchor's lifecycle: allocate → stage_in → (start) launch → wait → stage_out → end job.

Every phase change goes through `fire`, which looks the (phase, event) pair up in
`anchor/table.py` and runs the action named there.  Requests from the control socket
(`start`, `kill`, `delete`) and signals to the anchor (`post`, from the signal
handler's queue) are events like any other.  One cleanup routine (`_cleanup`) serves
both the end of a container and an aborted create.

Threads: `fire` runs under one lock, so phase changes and the quick part of each action
never interleave.  An action's slow part (a Slurm command, a hook, waiting for the step)
is returned as a function and runs in a daemon thread of its own, which reports back
with another event.  `create` runs in the caller's thread; the watches (job, step,
time limit) stop firing once the cleanup has begun.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable

from scrun_py.anchor.job import Job
from scrun_py.anchor.supervised import SupervisedContainer
from scrun_py.anchor.table import TABLE, Action, Event, Phase, Transition, kill_event
from scrun_py.base import procs, threads
from scrun_py.base.errors import CannotStart, ContainerNotRunning, ContainerStillRunning, ScrunError
from scrun_py.base.layout import SOCKET_NAME
from scrun_py.base.records import NamedTuple
from scrun_py.base.signames import SIGKILL, SIGTERM
from scrun_py.base.threads import Cancel, Cancelled
from scrun_py.container import rootdir
from scrun_py.container.status import Status
from scrun_py.slurm.backend import Allocation, SlurmBackend, Step
from scrun_py.slurm.options import JobOptions

KILL_GRACE_S = 15.0
# stop containers this long before the job's time limit (Slurm sends TERM at the limit)
TIME_LIMIT_MARGIN_S = 15.0
TIME_LIMIT_GRACE_S = 5.0
# the job's end time is asked this long after the allocation (a time limit is at least a
# minute): a container that has ended by then never runs squeue for it, and the query
# stays out of the way of the step's launch
JOB_INFO_DELAY_S = 5.0


class Occurrence(NamedTuple):
    """One event as it happened: its kind (the table's Event) and what came with it."""

    kind: Event
    code: int = 1  # the exit code this event means when no step ran (or the step's)
    sig: int = 0
    reason: str = ""


_REFUSALS: dict[Action, Callable[[str], ScrunError]] = {
    Action.REFUSE_START_CREATING:
        lambda _id: CannotStart(CannotStart.CREATING),
    Action.REFUSE_START_STOPPED:
        lambda _id: CannotStart(CannotStart.STOPPED),
    Action.REFUSE_DELETE_RUNNING: ContainerStillRunning,
    Action.REFUSE_NOT_RUNNING: lambda _id: ContainerNotRunning(),
}


Work = Callable[[], None]


class Lifecycle:
    def __init__(self, container: SupervisedContainer, backend: SlurmBackend, job_opts: JobOptions,
                 alloc_timeout_s: float | None) -> None:
        self.container = container
        self.backend = backend
        self.phase = Phase.CREATING
        self.trace: list[tuple[Phase, Event, Phase]] = []  # every transition, in order
        self.job = Job(container, backend, job_opts, alloc_timeout_s)
        self.exit_code: int | None = None  # the container's, once its step has exited
        self.stop_code: int | None = None  # from the first stop request
        self.stop_reason = ""
        self.delete_requested = False
        self.launch_error: ScrunError | None = None
        self.result = 1  # the anchor's exit code, once stopped
        self.job_info_delay_s = JOB_INFO_DELAY_S
        self._lock = threading.RLock()
        self._launched = threading.Event()
        self._stopped = threading.Event()
        self._create_cancel = Cancel()  # a stop request interrupts create
        self._closing = Cancel()  # the cleanup has begun: the watches stop
        self._queue: queue.SimpleQueue[Occurrence] = queue.SimpleQueue()
        self._actions: dict[Action, Callable[[Occurrence], Work | None]] = {
            Action.NONE: lambda ev: None, Action.AWAIT_LAUNCH: lambda ev: None,
            Action.READY: self._ready, Action.LAUNCH: lambda ev: self._launch,
            Action.WATCH_STEP: self._watch,
            Action.SIGNAL: lambda ev: lambda: self.job.signal(ev.sig),
            Action.TERM_STEP: lambda ev: self._term_step,
            Action.KILL_STEP: self._kill_step, Action.KILL_LAUNCHED: self._kill_launched,
            Action.NOTE_STOP: self._note_stop, Action.STOP: self._stop,
            Action.CLEANUP: self._cleanup_after, Action.INTERRUPT_CREATE: self._interrupt,
            Action.CLEANUP_ABORTED: lambda ev: lambda: self._cleanup(aborted=True),
            Action.SKIP_STAGE_OUT: self._skip_stage_out, Action.FINISH: self._finish,
        }

    # ---- the one way to change phase ---------------------------------------------------------
    def fire(self, ev: Occurrence) -> tuple[Transition | None, threading.Thread | None]:
        with self._lock:
            t = TABLE.get((self.phase, ev.kind))
            if t is None:
                self.container.event("event ignored", phase=self.phase.value,
                                     lc_event=ev.kind.value)
                return None, None
            self.trace.append((self.phase, ev.kind, t.next))
            refusal = _REFUSALS.get(t.action)
            if refusal is not None:
                raise refusal(self.container.record.id)
            if t.next is not self.phase:
                self.container.event("phase", old=self.phase.value, new=t.next.value,
                                     lc_event=ev.kind.value)
                self.phase = t.next
            work = self._actions[t.action](ev)
            return t, (self._spawn(work, t.action.value) if work is not None else None)

    def post(self, ev: Occurrence) -> None:
        """For signal handlers: queue an event (the consumer thread fires it).  Only
        this: a handler runs between two bytecodes of whatever the main thread does."""
        self._queue.put_nowait(ev)

    def _spawn(self, work: Work, name: str) -> threading.Thread:
        def failed(exc: BaseException) -> None:
            self.container.log.error("anchor task failed", task=name, exc_info=exc)

        return threads.spawn(work, f"scrun-{name}", failed)

    def _consume(self) -> None:
        while True:
            ev = self._queue.get()
            self.container.event("anchor received signal", signal=ev.sig)
            with contextlib.suppress(ScrunError):
                self.fire(ev)

    # ---- requests (control socket) -----------------------------------------------------------
    def start(self) -> int:
        self.fire(Occurrence(Event.START))
        self._launched.wait()
        if self.launch_error is not None:
            raise self.launch_error
        return self.container.record.job_id

    def kill(self, sig: int) -> None:
        t, work = self.fire(Occurrence(kill_event(sig), code=128 + sig, sig=sig,
                               reason=f"signal {sig} before start"))
        if t is not None and t.action is Action.SIGNAL and work is not None:
            work.join()

    def delete(self, force: bool) -> None:
        self.fire(Occurrence(Event.DELETE_FORCE if force else Event.DELETE, code=128 + SIGKILL,
                     reason="delete"))
        self._stopped.wait()

    def wait_stopped(self, timeout_s: float | None = None) -> int:
        self._stopped.wait(timeout_s)
        return self.result

    # ---- create ------------------------------------------------------------------------------
    def create(self) -> BaseException | None:
        """Allocate and stage in, in this thread; None once `created`, else the failure
        (cleaned up)."""
        self._spawn(self._consume, "signals")
        try:
            self._create(self._create_cancel)
        except Cancelled:
            err: BaseException = self._interrupted()
        except Exception as exc:
            err = exc
        else:
            self.fire(Occurrence(Event.CREATED_OK))
            if self.phase is Phase.CREATED:
                return None
            self._stopped.wait()  # a stop won the race: CREATED_OK cleaned up
            return self._interrupted()
        self.container.log.info("create failed", error=str(err),
                                container_id=self.container.record.id)
        self.fire(Occurrence(Event.CREATE_FAILED))
        self._stopped.wait()
        return err

    def _interrupted(self) -> ScrunError:
        return ScrunError(f"container creation interrupted: {self.stop_reason or 'stopped'}")

    def _create(self, cancel: Cancel) -> None:
        container = self.container
        container.save()
        container.open_console()
        alloc = self.job.allocate(cancel)
        self._spawn(lambda: self._watch_job(alloc), "watch-job")
        if procs.in_user_namespace():  # stage_in needs the job's real uid/gid first
            end, uid, gid = threads.call(lambda: self.job.info(alloc), cancel, "scrun-info")
            self._watch_time_limit(end)
        else:  # only the time limit needs the job's details: not worth waiting for
            uid, gid = os.getuid(), os.getgid()
            self._spawn(lambda: self._time_limit_from_info(alloc), "job-info")
        cancel.check()
        container.stage_in(alloc, uid, gid, lambda cmd: self.backend.command_argv(
            alloc.job_id, cmd), cancel)
        container.send_console()
        container.write_pid_file()

    def _watch_job(self, alloc: Allocation) -> None:
        self.backend.wait_ended(alloc, self._closing)
        if self._closing.is_set():
            return
        self.container.event("job allocation ended", stderr=alloc.messages[-3:])
        reason = ("the job ended while the container was being created"
                  if self.phase is Phase.CREATING else "job ended before the container started")
        self.fire(Occurrence(Event.JOB_ENDED, reason=reason))

    def _time_limit_from_info(self, alloc: Allocation) -> None:
        if self._closing.sleep(self.job_info_delay_s):
            end, _, _ = self.job.info(alloc)
            self._watch_time_limit(end)

    def _watch_time_limit(self, end: float | None) -> None:
        if end is not None and not self._closing.is_set():
            delay = max(end - time.time() - TIME_LIMIT_MARGIN_S, 0.0)
            self.container.event("time limit watch", stop_in_s=round(delay, 1))
            self._spawn(lambda: self._time_limit(delay), "time-limit")

    def _time_limit(self, delay_s: float) -> None:
        if self._closing.sleep(delay_s):
            self.fire(Occurrence(Event.TIME_LIMIT, code=128 + SIGTERM, reason="time limit reached"))

    # ---- actions (under the lock; a returned function runs in its own thread) ----------------
    def _ready(self, ev: Occurrence) -> None:
        self.container.set_status(Status.CREATED)
        self.container.event("container created")

    def _note_stop(self, ev: Occurrence) -> None:
        if ev.kind in (Event.DELETE, Event.DELETE_FORCE):
            self.delete_requested = True
        if self.stop_code is None:
            self.stop_code, self.stop_reason = ev.code, ev.reason
            self.container.event("stop requested", reason=ev.reason)

    def _stop(self, ev: Occurrence) -> Work:
        self._note_stop(ev)
        return lambda: self._cleanup(aborted=False)

    def _interrupt(self, ev: Occurrence) -> None:
        self._note_stop(ev)
        self._create_cancel.set()

    def _skip_stage_out(self, ev: Occurrence) -> None:
        self.container.staged_in = False  # a second signal: just end the job

    def _finish(self, ev: Occurrence) -> None:
        self._stopped.set()

    def _cleanup_after(self, ev: Occurrence) -> Work:
        if ev.kind is Event.STEP_EXITED:
            self.exit_code = ev.code
        else:
            self._note_stop(ev)
        return lambda: self._cleanup(aborted=False)

    def _launch(self) -> None:
        """Launch the step; `start` answers once the phase has moved on (running, or
        stopping after a failed launch)."""
        try:
            self.job.launch()
        except Exception as exc:
            err = exc if isinstance(exc, ScrunError) else ScrunError(f"internal error: {exc!r}")
            self.launch_error = err
            try:
                self.fire(Occurrence(Event.LAUNCH_FAILED, reason=f"launch failed: {err}"))
            finally:
                self._launched.set()
            return
        try:
            self.fire(Occurrence(Event.LAUNCHED))
        finally:
            self._launched.set()

    def _watch(self, ev: Occurrence) -> None:
        step = self.job.step
        assert step is not None
        self.container.set_status(Status.RUNNING)
        self.container.event("launch finished", srun_pid=step.pid)
        self._spawn(lambda: self._watch_step(step), "watch-step")
        self._spawn(self.job.write_abandon_script, "abandon-script")

    def _kill_launched(self, ev: Occurrence) -> Work:
        self._watch(ev)
        return self._kill_step(ev)

    def _watch_step(self, step: Step) -> None:
        code = self.job.wait_step(step, check_revoked=self.phase is Phase.RUNNING,
                                  may_relaunch=lambda: self.phase is Phase.RUNNING)
        if not self._closing.is_set():
            self.fire(Occurrence(Event.STEP_EXITED, code=code))

    def _term_step(self) -> None:
        self.container.event("time limit reached: stopping the container")
        self.job.signal(SIGTERM)
        if not self.job.step_exits_within(TIME_LIMIT_GRACE_S):
            self.job.signal(SIGKILL)

    def _kill_step(self, ev: Occurrence) -> Work:
        self._note_stop(ev)
        return lambda: self.job.kill(KILL_GRACE_S)

    # ---- the one cleanup ---------------------------------------------------------------------
    def _cleanup(self, aborted: bool) -> None:
        """stage_out, end the job, then either mark the container stopped (teardown) or
        remove every trace of it (aborted create)."""
        container = self.container
        code = 1 if aborted else next(
            c for c in (self.exit_code, self.stop_code, 1) if c is not None)
        try:
            self._closing.set()
            hook_hung = container.hook_running  # stage_in still runs: the Lua state is busy
            if hook_hung:
                container.staged_in = False
            if not aborted:
                container.record.exit_code = code
            container.stage_out()
            self.job.end(code)
            if hook_hung:
                for pid in procs.descendants(os.getpid()):  # what the hung hook started
                    with contextlib.suppress(OSError):
                        os.kill(pid, SIGKILL)
            container.close_pty()
            if not hook_hung:
                container.hooks.close()
            container.remove_pid_file()
            if aborted:
                rootdir.remove_tree(container.dir)
                return
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(container.dir, SOCKET_NAME))
            container.record.anchor_pid = container.record.pid = 0
            container.set_status(Status.STOPPED)
            if self.delete_requested:
                rootdir.remove_tree(container.dir)
            container.event("container stopped", exit_code=code)
            container.audit_exit(code)
        finally:
            self.result = code
            self.fire(Occurrence(Event.CLEANED))
