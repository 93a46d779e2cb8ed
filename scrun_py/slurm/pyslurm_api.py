"""The few calls of Slurm's C API scrun-py makes, through pyslurm (the only module that
imports it), with typed answers and one exception type.

pyslurm is optional (the `pyslurm` extra) and imported only by `load`, so no command
that does not choose the pyslurm backend pays for it.  pyslurm 25.11 is built against
one Slurm release and talks to slurmctld with that release's protocol.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from scrun_py.base.errors import SlurmError
from scrun_py.base.records import NamedTuple

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

# slurm_errno.h: the job is unknown to slurmctld (purged, never existed); it has ended
INVALID_JOB_ID = 2017
ALREADY_DONE = 2021
AUTO_INIT_SWITCH = "PYSLURM_DISABLE_AUTO_INIT"  # read by pyslurm's __init__


class Unavailable(Exception):
    """pyslurm cannot be used here; str() says why, in one line."""


class RpcFailed(SlurmError):
    """A Slurm RPC through pyslurm failed; `errno` is Slurm's error number (0 unknown)."""

    def __init__(self, call: str, errno: int, message: str) -> None:
        super().__init__(f"{call}: {message}")
        self.errno = errno


class JobView(NamedTuple):
    state: str  # slurm_job_state_string: RUNNING, CONFIGURING, COMPLETED, ...
    end_time: float | None  # epoch seconds; None when unlimited or unknown
    uid: int | None
    gid: int | None
    steps: dict[int, str]  # step id -> step name (batch/extern/interactive left out)


class PyslurmApi:
    """pyslurm's module, already initialized (slurm_init) for one slurm.conf."""

    def __init__(self, module: ModuleType) -> None:
        self._m = module
        self.version: str = str(module.__version__)  # pyslurm's own, e.g. 25.11.2

    @property
    def release(self) -> tuple[int, int]:
        """The Slurm release pyslurm was built for (its version's first two numbers)."""
        return release_of(self.version) or (0, 0)

    def _rpc(self, call: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._m.RPCError as exc:
            raise RpcFailed(call, int(getattr(exc, "errno", 0) or 0),
                            str(getattr(exc, "msg", "") or exc)) from None
        except Exception as exc:  # pyslurm raises ValueError, MemoryError, ... too
            raise RpcFailed(call, 0, f"{type(exc).__name__}: {exc}") from None

    def controller_version(self) -> str:
        """The SLURM_VERSION slurmctld reports (slurm_load_ctl_conf)."""
        conf = self._rpc("slurm_load_ctl_conf", self._m.slurmctld.Config.load)
        return str(conf.version or "")

    def job(self, job_id: int) -> JobView:
        """slurm_load_job, and the job's steps (slurm_get_job_steps) once it has started."""
        job = self._rpc("slurm_load_job", self._m.Job.load, job_id)
        steps = {int(sid): str(step.name or "") for sid, step in dict(job.steps).items()
                 if isinstance(sid, int)}
        end = job.end_time
        return JobView(state=str(job.state or ""),
                       end_time=float(end) if isinstance(end, int | float) and end > 0 else None,
                       uid=_int_or_none(job.user_id), gid=_int_or_none(job.group_id),
                       steps=steps)

    def cancel_job(self, job_id: int) -> None:
        """scancel JOB: slurm_kill_job with SIGKILL.  A job that has ended already (or
        is gone) is not an error, as for scancel."""
        try:
            self._rpc("slurm_kill_job", self._m.Job(job_id).cancel)
        except RpcFailed as exc:
            if exc.errno not in (INVALID_JOB_ID, ALREADY_DONE):
                raise

    def _step(self, job_id: int, step_id: int) -> Any:
        """The step as slurmctld has it (JobStep.load), or None when it has ended.  A
        JobStep made from the ids alone (JobStep(job, step)) has its het-job component 0
        instead of Slurm's "none": no step matches it, and its signal reaches nothing."""
        try:
            return self._rpc("slurm_get_job_steps", self._m.JobStep.load, job_id, step_id)
        except RpcFailed as exc:
            if exc.errno == INVALID_JOB_ID or str(exc).endswith("not found."):
                return None
            raise

    def cancel_step(self, job_id: int, step_id: int) -> None:
        """scancel JOB.STEP: slurm_kill_job_step with SIGKILL (ended: not an error)."""
        step = self._step(job_id, step_id)
        if step is None:
            return
        try:
            self._rpc("slurm_kill_job_step", step.cancel)
        except RpcFailed as exc:
            if exc.errno not in (INVALID_JOB_ID, ALREADY_DONE):
                raise

    def signal_step(self, job_id: int, step_id: int, sig: int) -> None:
        """scancel --signal=SIG JOB.STEP: slurm_signal_job_step (ended: nothing to do)."""
        step = self._step(job_id, step_id)
        if step is not None:
            self._rpc("slurm_signal_job_step", step.send_signal, sig)


def release_of(version: str) -> tuple[int, int] | None:
    """"25.11.7" -> (25, 11); None when it does not start with two numbers."""
    head = version.strip().split(".")
    if len(head) >= 2 and head[0].isdigit() and head[1].isdigit():
        return int(head[0]), int(head[1])
    return None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def load(slurm_conf: str | None) -> PyslurmApi:
    """Import pyslurm and initialize it (slurm_init) with the slurm.conf the client
    commands read: $SLURM_CONF, else `slurm_conf`.  Unavailable when it cannot be used.

    slurm_init ends the process (Slurm's fatal()) on a slurm.conf it cannot read, so an
    unreadable one is refused first; pyslurm's own slurm_init at import (which would read
    libslurm's compiled-in default) is turned off.  pyslurm's import also makes every
    later dlopen of the process RTLD_GLOBAL|RTLD_DEEPBIND: the flags are put back.
    """
    conf = os.environ.get("SLURM_CONF") or slurm_conf
    if not conf or not os.access(conf, os.R_OK):
        raise Unavailable(f"slurm.conf is not readable ({conf or 'no SLURM_CONF'}): "
                          "pyslurm's slurm_init would end the process")
    initialized = "pyslurm" in sys.modules  # by an earlier load (slurm_init runs once)
    flags = sys.getdlopenflags()
    had_switch = AUTO_INIT_SWITCH in os.environ
    os.environ[AUTO_INIT_SWITCH] = "1"
    try:
        import pyslurm
    except ModuleNotFoundError as exc:
        raise Unavailable(f"pyslurm is not installed ({exc})") from None
    except Exception as exc:  # a broken build (ImportError: a missing libslurm symbol)
        raise Unavailable(f"pyslurm does not load: {type(exc).__name__}: {exc}") from None
    finally:
        sys.setdlopenflags(flags)
        if not had_switch:
            os.environ.pop(AUTO_INIT_SWITCH, None)
    try:
        if not initialized:
            pyslurm.slurm_init(conf)
    except Exception as exc:
        raise Unavailable(f"pyslurm's slurm_init failed: {type(exc).__name__}: {exc}") from None
    return PyslurmApi(pyslurm)
