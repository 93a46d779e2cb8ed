"""An in-process Slurm backend for the anchor's unit tests (the contract of
scrun_py.slurm.backend.SlurmBackend), and hooks whose behaviour a test chooses.

Calls are recorded in `calls`; `hold(name)` makes the call `name` wait until
`open(name)`; `fail[name]` makes it raise.  `jobs` is what this Slurm knows: the state of
each job (allocate adds one, release and cancel end it); a test that attaches to an
existing job adds it first.  With `pending_reason` set, allocate queues the job first (it
is PENDING with that reason, which a test may change, until the allocate gate opens).  It
passes the contract suite (tests/backend_contract.py).
The container step is a `FakeStep` that exits when a test says so, or on a signal whose
default action ends a process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from scrun_py.anchor.table import FATAL_BY_DEFAULT
from scrun_py.base.errors import AllocationFailed
from scrun_py.base.threads import Cancel, Cancelled
from scrun_py.hooks.context import HookContext
from scrun_py.slurm.backend import (
    Allocation,
    AllocRequest,
    JobInfo,
    JobState,
    SlurmBackend,
    StepExit,
    StepRequest,
)

GATE_TIMEOUT_S = 60.0  # a held call never outlives a test


def _wait(ev: threading.Event, cancel: Cancel | None) -> None:
    """Until `ev` or `cancel` is set (at most GATE_TIMEOUT_S)."""
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not ev.wait(0.002) and time.monotonic() < deadline:
        if cancel is not None and cancel.is_set():
            return


class FakeStep:
    def __init__(self) -> None:
        self.pid = 4242
        self.returncode: int | None = None
        self._why: tuple[str | None, bool] = (None, False)
        self._done = threading.Event()

    def wait(self, timeout_s: float | None = None) -> StepExit | None:
        self._done.wait(timeout_s)
        return None if self.returncode is None else StepExit(self.returncode, *self._why)

    def exit(self, returncode: int, not_created: str | None = None,
             retry: bool = False) -> None:
        """End the step (`not_created`: as one Slurm never created, `retry` if it may
        work later)."""
        if self.returncode is None:
            self._why = (not_created, retry)
            self.returncode = returncode
            self._done.set()

    def kill(self) -> None:
        self.exit(-9)


class FakeSlurm:
    def __init__(self, job_id: int = 77) -> None:
        self.job_id = job_id
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[str, BaseException] = {}
        self.gates: dict[str, threading.Event] = {}
        self.ended = threading.Event()  # the allocation ended (release, or a test)
        self.revoked_flag = False
        self.end_time: float | None = None  # the job's time limit, as epoch seconds
        self.owner: tuple[int, int] | None = None
        self.ignore_signals = False  # the step survives every signal
        self.step: FakeStep | None = None
        self.launches: list[StepRequest] = []
        self.jobs: dict[int, str] = {}  # job id -> state (PENDING, RUNNING, COMPLETED, ...)
        self.pending_reason: str | None = None  # allocate queues the job (see above)

    # ---- test controls -------------------------------------------------------------------
    def hold(self, name: str) -> None:
        self.gates[name] = threading.Event()

    def open(self, name: str) -> None:
        self.gates.setdefault(name, threading.Event()).set()

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def last(self) -> tuple[Any, ...]:
        """The last call but the time-limit watch's job_info and the pending watch's
        job_state, which run in threads of their own whenever the lifecycle gets to them."""
        return [c for c in self.calls if c[0] not in ("job_info", "job_state")][-1]

    def _call(self, name: str, *args: Any, cancel: Cancel | None = None) -> None:
        self.calls.append((name, *args))
        gate = self.gates.get(name)
        if gate is not None:
            _wait(gate, cancel)
            if cancel is not None:
                cancel.check()
        if name in self.fail:
            raise self.fail[name]

    # ---- SlurmBackend --------------------------------------------------------------------
    def allocate(self, req: AllocRequest, cancel: Cancel) -> Allocation:
        req.on_job_id(self.job_id)
        if self.pending_reason is not None:
            self.jobs[self.job_id] = "PENDING"
            if req.on_pending is not None:
                req.on_pending(self.job_id)
        try:
            self._call("allocate", tuple(req.opts), cancel=cancel)
        except Cancelled:
            self.calls.append(("cancel", self.job_id, None))  # as salloc's abort does
            self.jobs[self.job_id] = "CANCELLED"
            raise
        self.jobs[self.job_id] = "RUNNING"
        return Allocation(job_id=self.job_id, env={"SLURM_JOB_ID": str(self.job_id)},
                          owned=True)

    def attach(self, job_id: int, env: dict[str, str]) -> Allocation:
        self._call("attach", job_id)
        state = self.jobs.get(job_id, "")
        if state != "RUNNING":
            raise AllocationFailed(f"SLURM_JOB_ID={job_id} is not a running job "
                                   f"({state or 'unknown'})")
        return Allocation(job_id=job_id, env=dict(env), owned=False)

    def wait_ended(self, alloc: Allocation, cancel: Cancel) -> None:
        _wait(self.ended if alloc.owned else threading.Event(), cancel)

    def revoked(self, alloc: Allocation) -> bool:
        return self.revoked_flag

    def job_info(self, job_id: int) -> JobInfo | None:
        self._call("job_info", job_id)
        if job_id not in self.jobs:
            return None
        uid, gid = self.owner or (None, None)
        return JobInfo(end_time=self.end_time, uid=uid, gid=gid)

    def job_state(self, job_id: int) -> JobState | None:
        self.calls.append(("job_state", job_id))
        if "job_state" in self.fail:  # as Slurm not answering: no exception (the contract)
            return None
        state = self.jobs.get(job_id)
        if state is None:
            return None
        reason = self.pending_reason if state == "PENDING" else None
        return JobState(state=state, reason=reason or "None")

    def launch_step(self, req: StepRequest) -> FakeStep:
        self.launches.append(req)
        self._call("launch_step", req.job_id)
        self.step = FakeStep()
        return self.step

    def step_id(self, job_id: int, alive: Callable[[], bool]) -> int | None:
        return 0

    def signal(self, job_id: int, step_id: int | None, sig: int, env: dict[str, str],
                     alive: Callable[[], bool]) -> None:
        self._call("signal", sig)
        if self.step is not None and not self.ignore_signals and sig in FATAL_BY_DEFAULT:
            self.step.exit(-sig)

    def abandon_script(self, alloc: Allocation, step_id: int) -> str | None:
        return f"kill-container {alloc.job_id} {step_id}\n"

    def command_argv(self, job_id: int, command: str) -> list[str]:
        return ["on-nodes", str(job_id), command]

    def cancel(self, job_id: int, step_id: int | None = None) -> None:
        self._call("cancel", job_id, step_id)
        if step_id is None and job_id in self.jobs:
            self.jobs[job_id] = "CANCELLED"

    def release(self, alloc: Allocation, exit_code: int, timeout_s: float) -> None:
        self._call("release", exit_code)
        self.jobs[alloc.job_id] = "COMPLETED" if exit_code == 0 else "FAILED"
        self.ended.set()


def as_backend(fake: FakeSlurm) -> SlurmBackend:
    """FakeSlurm as the interface: mypy checks it fits (tests/test_lint.py)."""
    return fake


class FakeHooks:
    """stage_in/stage_out that record their calls, and fail or hang when told to."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail: dict[str, Exception] = {}
        self.hang: set[str] = set()
        self.release = threading.Event()  # lets a hanging hook return (test teardown)
        self.closed = False

    def _run(self, name: str) -> None:
        self.calls.append(name)
        if name in self.hang:
            self.release.wait(30)
        if name in self.fail:
            raise self.fail[name]

    def stage_in(self, ctx: HookContext) -> None:
        self._run("stage_in")
        ctx.bundle = ctx.bundle + "/staged"

    def stage_out(self, ctx: HookContext) -> int | None:
        self._run("stage_out")
        return 0

    def close(self) -> None:
        self.closed = True
