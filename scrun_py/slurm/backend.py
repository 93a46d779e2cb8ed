"""The Slurm backend contract the anchor relies on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Allocation:
    """A job the container runs in (new, or an existing SLURM_JOB_ID)."""

    job_id: int
    env: dict[str, str]
    owned: bool
    holder: asyncio.subprocess.Process | None = None
    holder_stderr: list[str] = field(default_factory=list)
    poll_stderr: Callable[[], int] | None = None  # refresh holder_stderr (backend-specific)
    revoked: bool = False  # Slurm ended the job underneath us (scancel, node failure)


class SlurmBackend(Protocol):
    """What the anchor needs from Slurm.  Every call is bounded by a timeout."""

    async def allocate(self, alloc_opts: Sequence[str], env: dict[str, str],
                       on_job_id: Callable[[int], None], timeout_s: float | None) -> Allocation:
        """Request a job, wait until it runs; raise AllocationFailed with Slurm's message."""

    async def launch_step(self, argv: Sequence[str], env: dict[str, str], *,
                          stdio: tuple[int, int, int] | None,
                          pty_slave: int | None) -> asyncio.subprocess.Process:
        """Start the container step (srun) with the caller's stdio or a pty."""

    async def run(self, argv: Sequence[str], env: dict[str, str] | None = None,
                  timeout_s: float = 30.0) -> tuple[int, str]:
        """Run a short Slurm client command; return (rc, combined output)."""

    async def release(self, alloc: Allocation, exit_code: int, timeout_s: float) -> None:
        """End an owned job with the container's exit code (COMPLETED/FAILED)."""

    async def version(self) -> tuple[int, int]:
        """(major, minor) of the Slurm client commands."""
