"""The one runner of Slurm's short client commands (squeue, scancel, srun --version, the
helper steps of `kill` and `ps`), over base/procs.py `run`: the program found on PATH's
absolute entries only, in a session of its own, killed with its group at the timeout.

Slurm's programs start elsewhere in three cases, each for a reason: the long-lived ones
(salloc and its holder: slurm/salloc_holder.py; the container step: slurm/cli_backend.py
`launch_step`; exec's helper step: slurm/node_step.py `supervise`) keep their stdio and
outlive a call; `--version` asks `srun --version` through base/version.py, which may
import nothing of scrun-py's but the version lines (tests/unit/test_imports.py); the Lua
hooks' commands (hooks/_builtins.py `run_command`, the srun of slurm.remote_command
among them) run with no time limit, as Slurm runs them.  doctor asks Slurm through its
own probe runner (commands/doctor/context.py), under one deadline for all its checks."""

from __future__ import annotations

from scrun_py.base import procs
from scrun_py.base.errors import SlurmError

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: the default wait for a short command
TIMEOUT_S = 30.0


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout_s: float = TIMEOUT_S, apart: bool = False) -> procs.Result:
    """What `argv` did (procs.run: stdout and stderr interleaved, or `apart`); a
    program that could not start or ran past `timeout_s` is a Result that says so."""
    return procs.run(argv, env=env, timeout_s=timeout_s, apart=apart)


def checked(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            timeout_s: float = TIMEOUT_S) -> procs.Result:
    """`run`, with a SlurmError when the program could not start or timed out."""
    res = run(argv, env=env, timeout_s=timeout_s)
    if res.error:
        raise SlurmError(f"cannot run {argv[0]}: {res.error}")
    if res.timed_out:
        raise SlurmError(f"{argv[0]} timed out after {timeout_s:g}s")
    return res


def stdout_of(argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> str | None:
    """The stdout of `argv` (its stderr apart) when it succeeded; None when it failed,
    timed out or could not start."""
    res = run(argv, env=env, timeout_s=timeout_s, apart=True)
    return res.text if res.status == 0 and not res.error and not res.timed_out else None
