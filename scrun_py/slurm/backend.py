"""The Slurm backend contract: what the anchor asks of Slurm, with typed answers.

Two implementations: `cli_backend.CliSlurm` with Slurm's client commands, and
`pyslurm_backend.PyslurmSlurm` with Slurm's C API through pyslurm for what the API offers
and a CliSlurm for the rest (the optional pyslurm extra).  slurm/choice.py picks one for
each anchor (SCRUN_PY_SLURM_BACKEND: cli, pyslurm or auto).  The unit tests implement the
contract in-process (tests/unit/fake_slurm.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scrun_py.base.records import NamedTuple, Protocol
from scrun_py.base.threads import Cancel


class Allocation:
    """A job the container runs in: a new one (owned) or an existing SLURM_JOB_ID."""

    def __init__(self, job_id: int, env: dict[str, str], owned: bool) -> None:
        self.job_id = job_id
        self.env = env  # the job environment
        self.owned = owned
        self.messages: list[str] = []  # the allocator's last output lines


class JobInfo(NamedTuple):
    end_time: float | None  # epoch seconds; None when unlimited or unknown
    uid: int | None
    gid: int | None


class JobState(NamedTuple):
    """A job's state and Slurm's reason for it, as squeue shows them (%T, %r)."""

    state: str  # PENDING, CONFIGURING, RUNNING, COMPLETED, ...
    reason: str  # why a pending job waits (Resources, Priority, Dependency, ...); "None": no reason


class AllocRequest(NamedTuple):
    """A job request: salloc's options, the environment it runs in, and whom to tell."""

    opts: Sequence[str]
    env: dict[str, str]
    on_job_id: Callable[[int], None]  # the job id, as soon as Slurm assigns it
    timeout_s: float | None  # None: wait until the job runs or `cancel` is set
    # what holding the allocation runs should the anchor die (see abandon_script)
    abandon_file: str | None = None
    on_pending: Callable[[int], None] | None = None  # Slurm queued the job


class StepRequest(NamedTuple):
    """The container step: slurmstepd runs the OCI runtime of oci.conf on `bundle`."""

    job_id: int
    container_id: str
    bundle: str
    args: Sequence[str]
    env: dict[str, str]
    step_opts: Sequence[str] = ()
    pty: bool = False  # srun --pty
    pty_slave: int | None = None  # stdio of srun (also its controlling terminal)
    stdio: tuple[int, int, int] = (0, 1, 2)
    # (bundle, release name) → why a Slurm whose slurmstepd runs BUNDLE/rootfs whatever
    # config.json's root.path says would run another rootfs than the config names, or
    # "" (the anchor passes oci/bundle.py bundle_rootfs_problem); None: not checked
    rootfs_problem: Callable[[str, str], str] | None = None


class StepExit(NamedTuple):
    """How the container step ended."""

    returncode: int  # negative N: killed by signal N (subprocess's convention)
    not_created: str | None = None  # Slurm's reason when the step was never created
    retry: bool = False  # not created because slurmctld did not answer: may work later


class Step(Protocol):
    """A running container step."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def wait(self, timeout_s: float | None = None) -> StepExit | None:
        """How the step ended, once it has (the container's last stderr bytes passed on
        by then); None if it still runs after `timeout_s`."""

    def kill(self) -> None: ...


class SlurmBackend(Protocol):
    """Every call blocks its caller (an anchor thread) and is bounded, except the two
    that wait for the job itself: `allocate` (until `cancel`) and `wait_ended`."""

    def allocate(self, req: AllocRequest, cancel: Cancel) -> Allocation:
        """Request a job and wait until it runs; raise AllocationFailed with Slurm's
        message, or Cancelled (the request withdrawn, its job cancelled) once `cancel` is
        set.  `req.on_job_id` hears the job id as soon as Slurm assigns it,
        `req.on_pending` (after it) when Slurm queues the job instead of granting it at
        once; both are called in the caller's thread and must return quickly.  Should the
        anchor die, what holds the allocation runs `req.abandon_file` (if it exists then:
        see abandon_script) before it ends the job."""

    def attach(self, job_id: int, env: dict[str, str]) -> Allocation:
        """Use an existing job; raise AllocationFailed unless it is running."""

    def wait_ended(self, alloc: Allocation, cancel: Cancel) -> None:
        """Return when the job's allocation has ended (never for a job not owned), or
        once `cancel` is set."""

    def revoked(self, alloc: Allocation) -> bool:
        """Did Slurm end the job underneath us (scancel, node failure)?"""

    def job_info(self, job_id: int) -> JobInfo | None:
        """End time and owner of the job; None when Slurm does not answer."""

    def job_state(self, job_id: int) -> JobState | None:
        """The job's state and Slurm's reason for it (why a pending job waits); None when
        Slurm does not answer or no longer knows the job."""

    def launch_step(self, req: StepRequest) -> Step:
        """Start the container step; raise StepLaunchFailed."""

    def step_id(self, job_id: int, alive: Callable[[], bool]) -> int | None:
        """The container step's id, retried while `alive()`; None if unknown."""

    def signal(self, job_id: int, step_id: int | None, sig: int, env: dict[str, str],
               alive: Callable[[], bool]) -> None:
        """Deliver `sig` to the container's init (through the runtime when possible)."""

    def abandon_script(self, alloc: Allocation, step_id: int) -> str | None:
        """The shell script for allocate's `abandon_file`: it SIGKILLs the container's
        every task without the anchor (None if that is impossible)."""

    def command_argv(self, job_id: int, command: str) -> list[str]:
        """A helper step running `/bin/sh -c command` on every node of the job."""

    def cancel(self, job_id: int, step_id: int | None = None) -> None:
        """scancel the job (or one step of it)."""

    def release(self, alloc: Allocation, exit_code: int, timeout_s: float) -> None:
        """End an owned job with the container's exit code (COMPLETED/FAILED)."""
