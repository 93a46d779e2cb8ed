"""Slurm backend on Slurm's C API through pyslurm, for what the API offers; the rest on
Slurm's client commands (a `CliSlurm` it holds).

Through pyslurm: the job's state (attach), end time and owner (job_info), the container
step's id (step_id), cancelling the job or a step, the signal to the step when it cannot
go through the runtime, and the release (slurmctld's version instead of
`srun --version`).  On the client commands: the allocation (salloc and its holder), a
queued job's state and reason (squeue), the container step and every helper step (srun),
and a signal to the whole job (see docs/architecture.md for why).  A pyslurm call that
fails is logged and made again with the client command, so a failure costs time, never
the container.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from scrun_py.base.errors import AllocationFailed
from scrun_py.base.records import Protocol
from scrun_py.base.threads import Cancel
from scrun_py.slurm.backend import Allocation, AllocRequest, JobInfo, JobState, Step, StepRequest
from scrun_py.slurm.cli_backend import STEP_ID_ATTEMPTS, CliSlurm
from scrun_py.slurm.options import JOB_NAME
from scrun_py.slurm.pyslurm_api import INVALID_JOB_ID, PyslurmApi, RpcFailed

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

ATTACHABLE = ("RUNNING", "CONFIGURING")


class Warn(Protocol):
    def __call__(self, msg: str, **fields: Any) -> None: ...


class PyslurmSlurm:
    def __init__(self, cli: CliSlurm, api: Callable[[], PyslurmApi | None],
                 warn: Warn) -> None:
        """`api()` gives pyslurm once it is loaded (it may wait for that), or None when
        it cannot be used: every call then runs the client command.  `warn` hears each
        call that fell back to the CLI."""
        self.cli = cli
        self._api = api
        self._warn = warn

    def _fallback(self, call: str, exc: Exception) -> None:
        self._warn("pyslurm call failed, using the Slurm command instead", call=call,
                   error=str(exc))

    # ---- on the client commands: salloc and srun -------------------------------------------
    # One line each, the CLI backend's method of the same name: the job is held by
    # salloc and the step run by srun whichever backend answers the queries, so these
    # repeat CliSlurm's signatures (a copy by shape only; the contract tests run both).
    def allocate(self, req: AllocRequest, cancel: Cancel) -> Allocation:
        return self.cli.allocate(req, cancel)

    def job_state(self, job_id: int) -> JobState | None:
        # squeue: pyslurm_api's JobView carries no reason
        return self.cli.job_state(job_id)

    def wait_ended(self, alloc: Allocation, cancel: Cancel) -> None:
        self.cli.wait_ended(alloc, cancel)

    def revoked(self, alloc: Allocation) -> bool:
        return self.cli.revoked(alloc)

    def release(self, alloc: Allocation, exit_code: int, timeout_s: float) -> None:
        self.cli.release(alloc, exit_code, timeout_s)

    def launch_step(self, req: StepRequest) -> Step:
        return self.cli.launch_step(req)

    def abandon_script(self, alloc: Allocation, step_id: int) -> str | None:
        return self.cli.abandon_script(alloc, step_id)

    def command_argv(self, job_id: int, command: str) -> list[str]:
        return self.cli.command_argv(job_id, command)

    # ---- through pyslurm --------------------------------------------------------------------
    def attach(self, job_id: int, env: dict[str, str]) -> Allocation:
        api = self._api()
        if api is not None:
            try:
                state = api.job(job_id).state
            except RpcFailed as exc:
                if exc.errno == INVALID_JOB_ID:
                    raise AllocationFailed(f"SLURM_JOB_ID={job_id} is not a running job "
                                           f"({exc.args[0].partition(': ')[2]})") from None
                self._fallback("attach", exc)
            else:
                if state not in ATTACHABLE:
                    raise AllocationFailed(
                        f"SLURM_JOB_ID={job_id} is not a running job ({state or 'unknown'})")
                return Allocation(job_id=job_id, env=dict(env), owned=False)
        return self.cli.attach(job_id, env)

    def job_info(self, job_id: int) -> JobInfo | None:
        api = self._api()
        if api is not None:
            try:
                job = api.job(job_id)
            except RpcFailed as exc:
                if exc.errno == INVALID_JOB_ID:
                    return None
                self._fallback("job_info", exc)
            else:
                return JobInfo(end_time=job.end_time, uid=job.uid, gid=job.gid)
        return self.cli.job_info(job_id)

    def step_id(self, job_id: int, alive: Callable[[], bool]) -> int | None:
        api = self._api()
        if api is None:
            return self.cli.step_id(job_id, alive)
        for _ in range(STEP_ID_ATTEMPTS):
            try:
                steps = api.job(job_id).steps
            except RpcFailed as exc:
                if exc.errno == INVALID_JOB_ID:
                    return None
                self._fallback("step_id", exc)
                return self.cli.step_id(job_id, alive)
            ids = [sid for sid, name in steps.items() if name == JOB_NAME]
            if ids:
                return max(ids)
            if not alive():
                return None
            time.sleep(0.1)
        return None

    def signal(self, job_id: int, step_id: int | None, sig: int, env: dict[str, str],
               alive: Callable[[], bool]) -> None:
        if self.cli.signal_through_runtime(job_id, step_id, sig, env, alive):
            return
        api = self._api() if step_id is not None else None
        if api is not None and step_id is not None:
            try:
                api.signal_step(job_id, step_id, sig)
                return
            except RpcFailed as exc:
                self._fallback("signal", exc)
        # the whole job stays on scancel: pyslurm's Job.send_signal judges its RPC by a
        # possibly stale errno, and a signal that seemed to fail would be sent twice
        self.cli.scancel_signal(job_id, step_id, sig)

    def cancel(self, job_id: int, step_id: int | None = None) -> None:
        api = self._api()
        if api is not None:
            try:
                if step_id is None:
                    api.cancel_job(job_id)
                else:
                    api.cancel_step(job_id, step_id)
                return
            except RpcFailed as exc:
                self._fallback("cancel", exc)
        self.cli.cancel(job_id, step_id)
