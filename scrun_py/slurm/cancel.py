"""Ending a job from a short-lived command: `delete` of a container whose anchor died
without ending its job (a SIGKILLed anchor) runs scancel here, with no backend."""

from __future__ import annotations

from scrun_py.slurm import runner
from scrun_py.slurm.argv import build_scancel_argv

CANCEL_TIMEOUT_S = 30.0


def cancel_job(job_id: int) -> None:
    """scancel the job; a failure is Slurm's to report in its own log (the container is
    deleted either way)."""
    runner.run(build_scancel_argv(job_id), timeout_s=CANCEL_TIMEOUT_S)
