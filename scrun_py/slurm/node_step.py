"""Helper steps beside a running container's step, on its node: what `ps` and `exec`
run there (the node's OCI runtime on the container's id on the node, derived from
oci.conf's RunTimeKill by argv.node_runtime_command), and the container step's id.

The scripts here run on a compute node, through argv.build_node_step_argv, which puts
argv.NODE_PATH_PROLOGUE first: their programs (the runtime, sleep, sed, head, cat, tr,
id) are found in the absolute entries of the node's PATH only (see slurm/argv.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from scrun_py.slurm import argv as slurm_argv

#: waiting for squeue, and for `ps`'s step
QUERY_TIMEOUT_S = 60.0

#: how long `ps` and `exec` wait on the node for the container to exist there (tenths
#: of a second)
NODE_WAIT_TENTHS = 100

# What `ps` and `exec` run on the node first: `start` returns once the container's step
# has been launched, and the runtime creates the container on each node a moment later
# (tens of ms, more on a busy node).  A `ps` or `exec` right after start (`docker run -d`
# and then `docker top` or `docker exec`) would find no container there and fail with
# the runtime's "No such file": the script waits until the runtime knows the container,
# for at most NODE_WAIT_TENTHS.  A container that has already exited there costs that
# wait before the runtime says so.
_WAIT_FOR_CONTAINER = """n=0
until {state} >/dev/null 2>&1 || [ $n -ge {tenths} ]; do sleep 0.1; n=$((n+1)); done
"""

# Run on the node by `ps`, after the wait.  A rootless runtime without a cgroup of its
# own cannot list the container's processes (crun: `the container is not using
# cgroups`): then the init process (`state`'s pid) and its descendants
# (/proc/PID/task/*/children), as a JSON array like `ps --format json` prints.
_PS_SCRIPT = _WAIT_FOR_CONTAINER + """{ps} 2>/dev/null && exit 0
pid=$({state} | sed -n 's/^.*"pid": *\\([0-9][0-9]*\\).*$/\\1/p' | head -n 1)
[ -n "$pid" ] && [ "$pid" != 0 ] || exit 1
all=$pid; new=$pid
while [ -n "$new" ]; do
  next=; for p in $new; do next="$next $(cat /proc/$p/task/*/children 2>/dev/null)"; done
  new=$(echo $next); [ -z "$new" ] || all="$all $new"
done
echo "[$(echo $all | tr ' ' ',')]"
"""


class NodeRuntime:
    """The node runtime's command line for one container step: RunTimeKill's runtime
    and global options (or `runtime`, the site's `[exec] runtime`) and its container id
    pattern, expanded for `job_id`.`step_id` task 0."""

    def __init__(self, kill_pattern: str, *, job_id: int, step_id: int,
                 runtime: str | None = None) -> None:
        if runtime:
            ids = [w for w in kill_pattern.split() if "%" in w]
            kill_pattern = f"{runtime} kill {ids[-1] if ids else ''}"
        self.kill_pattern = kill_pattern
        self.job_id = job_id
        self.step_id = step_id

    def command(self, words: Sequence[str]) -> str:
        """ValueError when the pattern is no crun/runc kill command line."""
        return slurm_argv.node_runtime_command(self.kill_pattern, words, job_id=self.job_id,
                                               step_id=self.step_id)


def ps_script(runtime: NodeRuntime) -> str:
    return _PS_SCRIPT.format(ps=runtime.command(["ps", "--format", "json"]),
                             state=runtime.command(["state"]), tenths=NODE_WAIT_TENTHS)


# Run on the node by `exec`, after the wait: the runtime's exec replaces the shell.
_EXEC_SCRIPT = _WAIT_FOR_CONTAINER + "exec {exec}"


def exec_command(runtime: NodeRuntime, words: Sequence[str], args: Sequence[str]) -> str:
    """`<runtime> exec <words> <id> <args>` once `<runtime> state <id>` answers (see
    _WAIT_FOR_CONTAINER): `words` shell-quoted with `%` doubled."""
    import shlex

    return _EXEC_SCRIPT.format(state=runtime.command(["state"]), tenths=NODE_WAIT_TENTHS,
                               exec=runtime.command(words) + " " + shlex.join(args))


def step_argv(job_id: int, command: str, *, srun: Sequence[str], name: str,
              pty: bool = False, nodelist: str | None = None) -> list[str]:
    """The helper step's argv: `srun` (SrunPath and SrunArgs) on `nodelist`, default the
    job's first node, where the container's task 0 runs (build_node_step_argv)."""
    return slurm_argv.build_node_step_argv(job_id=job_id, command=command, srun=srun,
                                           name=name, nodelist=nodelist, pty=pty)


def _query(argv: list[str], env: dict[str, str]) -> str | None:
    """squeue's stdout (stderr apart); None when it fails, times out or is not found.
    squeue is run by the absolute path procs.resolve_program finds in `env`'s PATH."""
    import subprocess

    from scrun_py.base import procs

    try:
        res = subprocess.run(argv, executable=procs.resolve_program(argv[0], env), env=env,
                             capture_output=True, text=True, timeout=QUERY_TIMEOUT_S,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


def step_nodelist(job_id: int, step_id: int, env: dict[str, str]) -> str | None:
    """The nodes of step `job_id`.`step_id` as squeue writes them (`n[1-3]`); None when
    squeue does not say (no such step, squeue failed)."""
    out = _query(slurm_argv.build_step_nodes_argv(job_id, step_id), env)
    lines = (out or "").split()
    return lines[0] if len(lines) == 1 else None


def container_step_id(job_id: int, env: dict[str, str]) -> int | None:
    """The id of the job's container step (named scrun) from squeue; None if none."""
    from scrun_py.slurm import parse
    from scrun_py.slurm.options import JOB_NAME

    ids = parse.parse_step_ids(_query(slurm_argv.build_step_list_argv(job_id), env) or "",
                               JOB_NAME)
    return max(ids) if ids else None
