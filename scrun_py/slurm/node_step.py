"""Helper steps beside a running container's step, on its node: the one home of what
`ps` and `exec` do there.  The target (NodeTarget: the container step, its nodes, the
node chosen for an exec), the node runtime's command line (NodeRuntime: the runtime and
the container's id on the node, derived from oci.conf's RunTimeKill by
argv.node_runtime_command), the scripts run on the node, srun's argv (argv.py's pure
builders), `ps_pids` (srun through slurm/runner.py), and what signals exec's runtime
on its node (signal_script, NodeTarget.signal_runtime); exec's srun itself runs under
slurm/supervisor.py.
The verbs (commands/ps.py, commands/exec.py) read the settings and print the result.

The scripts here run on a compute node, through argv.build_node_step_argv, which puts
argv.NODE_PATH_PROLOGUE first: their programs (the runtime, sleep, sed, head, cat, tr,
id) are found in the absolute entries of the node's PATH only (see slurm/argv.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from scrun_py.base import procs
from scrun_py.base.errors import ContainerNotRunning, ScrunError
from scrun_py.base.records import NamedTuple
from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm import runner

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: waiting for squeue
QUERY_TIMEOUT_S = 60.0
#: waiting for `ps`'s step, the node's answer
STEP_TIMEOUT_S = 60.0

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


#: what exec's node script writes on its stderr first, before the runtime's exec replaces
#: it: `<marker><pid> <start time> <node>`, the pid (the runtime's once it is replaced),
#: its start time (field 22 of /proc/PID/stat, which tells a reused pid) and the node.
#: The supervisor's stderr relay takes the line out (stderr_filter.LineFilter).
RUNTIME_MARKER = b"scrun-py exec runtime: "

# The start time of process $_p (field 22 of /proc/$_p/stat, after the command name in
# parentheses) as ${20}; false when the process is gone.  What RUNTIME_MARKER's line says
# and what _SIGNAL_SCRIPT checks.
_START_TIME = "_s=$(cat /proc/$_p/stat) && _s=${{_s##*) }} && set -- $_s"

# Run on the node by `exec`, after the wait: the line of RUNTIME_MARKER, then the
# runtime's exec replaces the shell.
_EXEC_SCRIPT = _WAIT_FOR_CONTAINER + "_p=$$; " + _START_TIME + """ && \
echo "{marker}$$ ${{20}} $SLURMD_NODENAME" >&2
exec {exec}"""

# Run on the node to signal exec's runtime (RUNTIME_MARKER's pid and start time): only the
# process that has that start time still.
_SIGNAL_SCRIPT = "_p={pid}; " + _START_TIME + """ || exit 0
[ "${{20}}" = {start} ] && kill -{signum} {pid}
"""

# The same with a terminal (`exec --tty`, under srun's pty).  crun makes a pty of its own
# for the process and copies it to its stdout while the process runs; what is still in
# that pty when the process exits it writes to its stderr as an error record, red and
# time-stamped when its stderr is a terminal: `docker exec -t C echo ok` then sometimes
# printed `\x1b[1;31m<time>Z: ok\x1b[0m`.  So the runtime's stderr is a pipe to `cat`,
# which writes those bytes to the terminal as they are; its stdout and stdin stay the
# terminal, and its status comes back through fd 5.
_EXEC_TTY_SCRIPT = _WAIT_FOR_CONTAINER + """{{ s=$( {{ {{ {exec} 4>&- 5>&-; echo $? >&5; }} \
2>&1 >&4 4>&- | cat >&2 4>&- 5>&-; }} 5>&1 ); }} 4>&1
exit "${{s:-1}}"
"""


def exec_command(runtime: NodeRuntime, words: Sequence[str], args: Sequence[str], *,
                 terminal: bool = False) -> str:
    """`<runtime> exec <words> <id> <args>` once `<runtime> state <id>` answers (see
    _WAIT_FOR_CONTAINER): `words` shell-quoted with `%` doubled; with `terminal`, the
    runtime's stderr through `cat` (_EXEC_TTY_SCRIPT)."""
    import shlex

    script = _EXEC_TTY_SCRIPT if terminal else _EXEC_SCRIPT
    return script.format(state=runtime.command(["state"]), tenths=NODE_WAIT_TENTHS,
                         exec=runtime.command(words) + " " + shlex.join(args),
                         marker=RUNTIME_MARKER.decode())


def signal_script(process: tuple[int, int, str], signum: int) -> str:
    """What signals exec's runtime on its node: `process` is RUNTIME_MARKER's (pid, start
    time, node)."""
    pid, start, _node = process
    return _SIGNAL_SCRIPT.format(pid=int(pid), start=int(start), signum=int(signum))


def step_argv(job_id: int, command: str, *, srun: Sequence[str], name: str,
              pty: bool = False, nodelist: str | None = None) -> list[str]:
    """The helper step's argv: `srun` (SrunPath and SrunArgs) on `nodelist`, default the
    job's first node, where the container's task 0 runs (build_node_step_argv)."""
    return slurm_argv.build_node_step_argv(job_id=job_id, command=command, srun=srun,
                                           name=name, nodelist=nodelist, pty=pty)


def _query(argv: list[str], env: dict[str, str]) -> str | None:
    """squeue's stdout (stderr apart); None when it fails, times out or is not found."""
    return runner.stdout_of(argv, env, QUERY_TIMEOUT_S)


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


# -- the target ---------------------------------------------------------------------------

class NodeSettings(NamedTuple):
    """What a helper step takes from the site: oci.conf's RunTimeKill, SrunPath and
    SrunArgs, the slurm.conf of the invocation, and `[exec] runtime` (None: RunTimeKill's
    runtime)."""

    kill_pattern: str
    srun_path: str
    srun_args: list[str]
    slurm_conf: str
    runtime: str | None = None


class NodeTarget:
    """Where and how to reach a running container's runtime on its node."""

    def __init__(self, settings: NodeSettings, job_id: int, step_id: int | None, *,
                 verb: str) -> None:
        self.settings = settings
        self.job_id = job_id
        self.verb = verb
        if step_id is None:  # the record's, else squeue's
            step_id = container_step_id(job_id, self.env())
            if step_id is None:
                raise ContainerNotRunning()
        self.runtime = NodeRuntime(settings.kill_pattern, job_id=job_id, step_id=step_id,
                                   runtime=settings.runtime)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = self.settings.slurm_conf
        return env

    def derived(self, build: Callable[[], str]) -> str:
        """`build()`, its ValueError worded as the verb's error."""
        try:
            return build()
        except ValueError as exc:
            raise ScrunError(f"{self.verb}: cannot derive the node's runtime command from "
                             f"oci.conf's RunTimeKill: {exc}") from None

    def step_nodes(self) -> tuple[str, list[str]] | None:
        """The nodes of the container's step: squeue's host list and its names, in
        order (the first is task 0's); None when squeue does not say."""
        from scrun_py.slurm import parse

        text = step_nodelist(self.job_id, self.runtime.step_id, self.env())
        if text is None:
            return None
        try:
            return text, parse.expand_hostlist(text)
        except ValueError:
            return text, []

    def step_argv(self, command: str, *, pty: bool = False,
                  nodelist: str | None = None) -> list[str]:
        """srun's argv on `nodelist`, by default the first node of the container's step,
        where its task 0 runs (`--relative=0` when squeue does not say: on 24.11 srun
        did not always honour it); as root of a user namespace (rootless podman) behind
        base/userns.py's `unshare` prefix, so that Slurm sees the real uid.  srun and
        unshare are named by their absolute paths (procs.resolve_program): unshare would
        look srun up in PATH, whose empty or relative entries name the caller's
        directory."""
        from scrun_py.base.userns import userns_prefix

        if nodelist is None:
            found = self.step_nodes()
            nodelist = found[1][0] if found and found[1] else None
        try:
            prefix = userns_prefix()
            srun = procs.resolve_program(self.settings.srun_path, self.env())
        except OSError as exc:
            raise ScrunError(f"{self.verb}: cannot run {exc.filename}: "
                             f"{exc.strerror}") from None
        return [*prefix, *step_argv(self.job_id, command,
                                    srun=[srun, *self.settings.srun_args],
                                    name=f"scrun-{self.verb}", pty=pty, nodelist=nodelist)]

    def signal_runtime(self, process: tuple[int, int, str], signum: int) -> None:
        """Send `signum` to exec's runtime on its node (`process`: RUNTIME_MARKER's pid,
        start time and node), in a helper step; what fails is not said: the exec goes on
        as it would have without the signal."""
        try:
            argv = self.step_argv(signal_script(process, signum), nodelist=process[2])
        except ScrunError:
            return
        runner.run(argv, env=self.env(), timeout_s=STEP_TIMEOUT_S, apart=True)


#: the exec'd process's variable, and the container's annotation, that name the node
EXEC_NODE_VAR = "SCRUN_EXEC_NODE"
EXEC_NODE_ANNOTATION = "org.scrun-py.exec.node"


def exec_node(env: list[str], annotations: dict[str, str]) -> tuple[str, str] | None:
    """The node named for the exec, and what named it: the process's SCRUN_EXEC_NODE (its
    last one, as a shell would take it), else the container's org.scrun-py.exec.node
    annotation.  None, an empty value too, for the node of the container's task 0."""
    values = [e.partition("=")[2] for e in env if e.partition("=")[0] == EXEC_NODE_VAR]
    if values and values[-1]:
        return values[-1], f"{EXEC_NODE_VAR} of the process"
    named = annotations.get(EXEC_NODE_ANNOTATION, "")
    if named:
        return named, f"the container's annotation {EXEC_NODE_ANNOTATION}"
    return None


def check_exec_node(target: NodeTarget, node: str, source: str) -> None:
    """`node` must be one of the nodes of the container's step (squeue's list)."""
    found = target.step_nodes()
    if found is None:
        raise ScrunError(f"exec: cannot tell the nodes of job {target.job_id}'s container "
                         f"step (squeue did not say) to check node {node!r} ({source})")
    text, nodes = found
    if node not in nodes:
        raise ScrunError(f"exec: node {node!r} ({source}) is not one of the container's "
                         f"nodes (job {target.job_id}: {text})")


# -- the runners --------------------------------------------------------------------------

def ps_pids(target: NodeTarget) -> list[int]:
    """The container's pids on its node: the node runtime's `ps` in a helper step."""
    argv = target.step_argv(target.derived(lambda: ps_script(target.runtime)))
    res = runner.run(argv, env=target.env(), timeout_s=STEP_TIMEOUT_S, apart=True)
    if res.timed_out:
        raise ScrunError(f"ps: no answer from the node in {STEP_TIMEOUT_S:.0f}s")
    if res.error:
        raise ScrunError(f"ps: cannot run {argv[0]}: {res.error}")
    if res.status != 0:
        raise ScrunError(f"ps: {step_error(res.stderr.decode(errors='replace'), res.status)}")
    return parse_pids(res.text)


def step_error(stderr: str, status: int) -> str:
    """The node runtime's last error line (crun's `{"msg":…}` JSON decoded), not srun's
    own report; srun's when there is nothing else."""
    import json

    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    own = [ln for ln in lines if not ln.startswith("srun: ")]
    if not own:
        return lines[-1] if lines else f"exit status {status}"
    last = own[-1]
    try:
        msg = json.loads(last).get("msg")
    except (ValueError, AttributeError):
        return last
    return msg if isinstance(msg, str) else last


def parse_pids(text: str) -> list[int]:
    """The node runtime's `ps --format json` output: a JSON array of pids (crun also
    prints objects with a `pid` key in some versions)."""
    import json

    try:
        data: Any = json.loads(text or "[]")
    except ValueError:
        raise ScrunError("ps: the node's runtime printed no JSON") from None
    if data is None:
        return []
    out: list[int] = []
    for item in data if isinstance(data, list) else []:
        pid = item.get("pid") if isinstance(item, dict) else item
        if type(pid) is int:
            out.append(pid)
    return out
