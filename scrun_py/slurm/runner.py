"""The one runner of Slurm's short client commands (squeue, scancel, srun --version, the
helper steps of `kill` and `ps`), over base/procs.py `run`: the program found on PATH's
absolute entries only, in a session of its own, killed with its group at the timeout.

Slurm's programs start elsewhere in three cases, each for a reason: the long-lived ones
(salloc and its holder: slurm/salloc_holder.py; the container step: slurm/cli_backend.py
`launch_step`; exec's helper step: slurm/supervisor.py `supervise`) keep their stdio and
outlive a call; `--version` asks `srun --version` through base/version.py, which may
import nothing of scrun-py's but the version lines (tests/unit/test_imports.py); the Lua
hooks' commands (hooks/_builtins.py `run_command`, the srun of slurm.remote_command
among them) run with no time limit, as Slurm runs them.  doctor asks Slurm through its
own probe runner (commands/doctor/context.py), under one deadline for all its checks."""

from __future__ import annotations

import os

from scrun_py.base import procs
from scrun_py.base.errors import SlurmError

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: the default wait for a short command
TIMEOUT_S = 30.0
#: where Slurm's programs start when the caller's directory will not do: every node has
#: it, and it is where 22.05's slurmstepd goes itself when it cannot enter a step's
FALLBACK_DIR = "/tmp"


def start_dir(opts: Sequence[str] = ()) -> str | None:
    """The directory Slurm's programs start in; None: the caller's own.

    slurmstepd enters srun's working directory for each task of a step (24.11 and later
    fail the step when it cannot, 22.05 warns "couldn't chdir" and goes to /tmp), and
    salloc's is the job's WorkDir.  So: the directory the job options name (`--chdir=`,
    from SCRUN_WORKING_DIR) when it exists; else the caller's, unless the job's user
    cannot enter it (root's home, say) or this process runs in a user namespace.  A
    rootless engine runs us there (rootless docker under rootlesskit, rootless podman):
    the mount namespace is the engine's own, and a path taken from it (rootlesskit's
    private copy of /run, /run/.ro…/user/UID/docker/…) need not exist for slurmd.  Then
    FALLBACK_DIR.  So too when the caller's directory is an OCI bundle (it holds a
    config.json): an engine runs its runtime in the bundle it made, in its storage on
    the login node's own disk, which a compute node does not have (dockerd's containerd
    does; on 24.11 and later the step then fails), or in a directory of its own in that
    bundle (podman's exec: the exec session's directory in the container's userdata).  The
    container's process never starts here: its working directory is config.json's
    process.cwd, inside the container."""
    chdir = next((o.partition("=")[2] for o in opts if o.startswith("--chdir=")), "")
    if chdir and os.path.isdir(chdir):
        return chdir
    try:
        cwd = os.getcwd()
        usable = os.access(cwd, os.X_OK) and not any(
            os.path.isfile(os.path.join(d, "config.json"))
            for d in (cwd, os.path.dirname(cwd)))
    except OSError:  # the caller's directory was removed
        usable = False
    return None if usable and not procs.in_user_namespace() else FALLBACK_DIR


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout_s: float = TIMEOUT_S, apart: bool = False) -> procs.Result:
    """What `argv` did (procs.run: stdout and stderr interleaved, or `apart`), started
    in `start_dir()`; a program that could not start or ran past `timeout_s` is a Result
    that says so."""
    return procs.run(argv, env=env, timeout_s=timeout_s, apart=apart, cwd=start_dir())


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
