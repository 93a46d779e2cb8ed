"""`exec [--process FILE] [--detach] [--pid-file P] [--console-socket S] [--tty] ID
[COMMAND...]`: run another process in a running container.

The container runs on a compute node: a supervisor (this process, or with --detach a
child of it that outlives it) runs a helper step of one task beside the container's
(`srun --jobid J --overlap`), whose command is the node runtime's `exec` on the
container's id on the node, both taken from oci.conf's RunTimeKill
(slurm/node_step.py), or `[exec] runtime` in scrun-py.toml.  The process's args, env,
cwd, user and terminal come from process.json (--process, as docker and podman pass it)
or, in runc's positional form, from COMMAND and the bundle's config.json.  stdio pass
through srun (a pty with --tty/--console-socket); srun's own exit report is dropped from
stderr.  The supervisor (slurm/supervisor.py) relays SIGTERM, SIGINT, SIGHUP, SIGUSR1
and SIGUSR2 and exits with srun's status: the process's, 128+N for signal N.  Without
a terminal a signal goes, in a second helper step, to the node's runtime alone, which
passes it on to the process once (as `runc exec` does); with a terminal it goes to srun,
which signals every process of the step.  The supervisor's pid is what --pid-file
holds.

The step runs on the node of the container's task 0 (its step's first node), or on the
node the process's environment names in SCRUN_EXEC_NODE, else the container's
annotation org.scrun-py.exec.node (config.json's at create): one of the nodes of the
container's step, whose local task 0 is the container there (`%t` = 0, `%n` the node).
"""

from __future__ import annotations

import os
import sys

from scrun_py.base.errors import ScrunError
from scrun_py.base.layout import CREATED, RUNNING, STOPPED
from scrun_py.base.records import NamedTuple
from scrun_py.container.handle import Container

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from scrun_py.base.invocation import Invocation
    from scrun_py.container.record import ContainerRecord
    from scrun_py.slurm.node_step import NodeTarget


class ExecOptions(NamedTuple):
    """exec's options (runc's), as the command line gives them."""

    process: str | None = None
    detach: bool = False
    pid_file: str | None = None
    console_socket: str | None = None
    tty: bool = False


class Process(NamedTuple):
    """What to run: a subset of the OCI process object."""

    args: list[str]
    env: list[str]
    cwd: str
    terminal: bool
    uid: int = 0
    gid: int = 0

    def runtime_words(self) -> list[str]:
        """The node runtime's `exec` options, shell-quoted, `%` doubled (the pattern
        expansion of node_runtime_command turns `%%` back into `%`)."""
        import shlex

        words = ["exec"]
        if self.terminal:
            words.append("--tty")
        words += [f"--env={e}" for e in self.env]
        words += [f"--cwd={self.cwd}"]
        if self.uid or self.gid:
            words.append(f"--user={self.uid}:{self.gid}")
        return [shlex.quote(w).replace("%", "%%") for w in words]


def exec_record(inv: Invocation, container_id: str) -> ContainerRecord:
    """The record of a running container; runc's words for a stopped one, and the
    same form for a created one (its process runs on a node only after start)."""
    with Container(inv.root_dir, container_id) as container:
        record = container.record()
        status = container.status(record)
    if status == STOPPED:
        raise ScrunError("cannot exec in a stopped container")
    if status == CREATED:
        raise ScrunError("cannot exec in a created container (scrun-py runs a container's "
                         "processes only once it is started)")
    if status != RUNNING:
        raise ScrunError(f"cannot exec in a {status} container")
    return record


def _load_json(path: str, what: str) -> Any:
    """The JSON document of the file `path` names (`what`: process, config), read as
    create reads a bundle's config.json (base/callerpath, at most MAX_CONFIG_BYTES): a
    FIFO, a device, another user's symbolic link or a huge file is refused at once."""
    import json

    from scrun_py.base import callerpath
    from scrun_py.oci.bundle import MAX_CONFIG_BYTES

    try:
        return json.loads(callerpath.read(path, MAX_CONFIG_BYTES, f"{what} file"))
    except OSError as exc:  # runc's `open PATH: no such file or directory`
        why = exc.strerror or str(exc)
        raise ScrunError(f"open {path}: {why[:1].lower()}{why[1:]}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[…"
        raise ScrunError(f"{what} {path}: not JSON: {exc}") from None


def load_process(process_file: str | None, command: list[str], tty: bool,
                 bundle: str) -> Process:
    """The process from process.json, or from `command` with the env and cwd of the
    bundle's config.json (runc's positional form); runc's checks (validateProcessSpec),
    and no NUL byte in what goes on srun's command line."""
    from scrun_py.oci.bundle import nul_problem

    if process_file:
        if command:
            raise ScrunError("exec: give either --process or a command, not both")
        raw = _load_json(process_file, "process")
    else:
        config = _load_json(os.path.join(bundle, "config.json"), "config")
        base = config.get("process") if isinstance(config, dict) else None
        base = base if isinstance(base, dict) else {}
        raw = {"args": command, "env": base.get("env", []), "cwd": base.get("cwd", "/"),
               "terminal": tty, "user": base.get("user", {})}
    if not isinstance(raw, dict):
        raise ScrunError("process is not a JSON object")
    args, env, cwd = raw.get("args"), raw.get("env") or [], raw.get("cwd", "")
    user: dict[str, Any] = raw["user"] if isinstance(raw.get("user"), dict) else {}
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        raise ScrunError("args must not be empty")
    if not isinstance(env, list) or not all(isinstance(e, str) for e in env):
        raise ScrunError("env must be a list of strings")
    if not isinstance(cwd, str) or not cwd:
        raise ScrunError("Cwd property must not be empty")
    if not cwd.startswith("/"):
        raise ScrunError("Cwd must be an absolute path")
    uid, gid = user.get("uid", 0), user.get("gid", 0)
    if type(uid) is not int or type(gid) is not int:
        raise ScrunError("user uid and gid must be integers")
    problem = nul_problem("args", args) or nul_problem("env", env, env=True)
    if problem or "\0" in cwd:  # each is a word of srun's argv
        raise ScrunError(f"process: {problem or 'cwd: contains a NUL byte'}")
    return Process(args, env, cwd, bool(raw.get("terminal")) or tty, uid, gid)


def step_argv(inv: Invocation, record: ContainerRecord,
              proc: Process) -> tuple[list[str], NodeTarget]:
    """The helper step's argv, on the node node_step.exec_node chooses, and its target
    (its environment, and where signals go)."""
    from scrun_py.site.oci_settings import node_settings
    from scrun_py.slurm import node_step

    runtime = exec_runtime_setting(inv)
    settings = node_settings(inv.slurm_conf_file(), "exec", runtime)
    target = node_step.NodeTarget(settings, record.job_id, record.step_id, verb="exec")
    chosen = node_step.exec_node(proc.env, record.annotations)
    if chosen is not None:
        node_step.check_exec_node(target, *chosen)
    command = target.derived(lambda: node_step.exec_command(
        target.runtime, proc.runtime_words(), proc.args, terminal=proc.terminal))
    return (target.step_argv(command, pty=proc.terminal,
                             nodelist=chosen[0] if chosen else None), target)


def exec_runtime_setting(inv: Invocation) -> str | None:
    """scrun-py.toml's `[exec] runtime`: the node runtime and its global options (None:
    RunTimeKill's)."""
    from scrun_py.site.presence import site_file_may_apply

    if not site_file_may_apply(inv.slurm_conf_file()):
        return None
    from scrun_py.site import site_conf

    return site_conf.exec_runtime(inv.slurm_conf_file())


#: the node runtime's exit status when its `exec` could not start the process (crun's and
#: runc's)
RUNTIME_EXEC_FAILED = 255
#: the node runtime's last stderr line when it could not start the process -> the status
#: crun and runc give through podman (define.TranslateExecErrorToExitCode) and docker:
#: 127 not found, 126 not executable.  crun 1.8: "executable file `X` not found in $PATH:
#: …", "open executable: Operation not permitted" (a directory), "exec container process
#: `X`: Permission denied"; runc 1.1: "exec failed: unable to start container process:
#: exec: "X": …"
_RUNTIME_WORDS = (
    (r"^executable file `.*` not found|^exec failed: unable to start container process: "
     r"exec: .*(executable file not found|no such file or directory)", 127),
    (r"^open executable: |^exec container process .*: (permission denied|operation not "
     r"permitted)|^exec failed: unable to start container process: exec: .*(permission "
     r"denied|is a directory)", 126),
)


def exec_status(status: int, stderr_tail: bytes) -> int:
    """The exec'd process's status, or 127/126 where the node's runtime could not start
    it (its status RUNTIME_EXEC_FAILED and its own words last on stderr), as podman and
    docker report a command that is not found or not executable."""
    if status != RUNTIME_EXEC_FAILED:
        return status
    lines = stderr_tail.decode(errors="replace").strip().splitlines()
    if not lines:
        return status
    import re

    for pattern, code in _RUNTIME_WORDS:
        if re.search(pattern, lines[-1].strip(), re.IGNORECASE):
            return code
    return status


#: what runc says (its stderr, then podman's and docker's) for a process it could not
#: start: podman's exec tests look for these words in the output
_RUNC_WORDS = {127: "executable file not found in $PATH", 126: "permission denied"}


def exec_status_said(arg0: str) -> Callable[[int, bytes], int]:
    """exec_status, and where it took the node runtime's failure for 127 or 126 one line
    on stderr in runc's words (`exec failed: unable to start container process: exec:
    "ARG0": permission denied`), as runc and crun users read it through the engines."""

    def status_of(status: int, stderr_tail: bytes) -> int:
        code = exec_status(status, stderr_tail)
        if code != status and code in _RUNC_WORDS:
            from scrun_py.base.logs import one_line

            line = (f"exec failed: unable to start container process: exec: "
                    f"\"{one_line(arg0)}\": {_RUNC_WORDS[code]}\n")
            try:
                os.write(2, line.encode(errors="replace"))
            except OSError:
                pass
        return code

    return status_of


def run(inv: Invocation, container_id: str, opts: ExecOptions,
        command: tuple[str, ...] | list[str] = ()) -> int:
    """Exit status of the process (0 with --detach once the supervisor runs)."""
    from scrun_py.slurm.supervisor import supervise

    record = exec_record(inv, container_id)
    proc = load_process(opts.process, list(command), opts.tty, record.bundle)
    argv, target = step_argv(inv, record, proc)
    env, status_of = target.env(), exec_status_said(proc.args[0])
    slave = console(proc, opts.console_socket)
    if not opts.detach:
        if opts.pid_file:
            from scrun_py.container.spool import write_pid_file

            write_pid_file(opts.pid_file, os.getpid())
        return supervise(argv, env, slave=slave, status_of=status_of, target=target)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the supervisor: the caller (a subreaper shim, conmon) reaps it
        code = 1
        try:
            code = supervise(argv, env, slave=slave, status_of=status_of, target=target)
        except ScrunError as exc:
            from scrun_py.base.logs import one_line

            os.write(2, f"scrun-py: {one_line(str(exc))}\n".encode())
        finally:
            os._exit(code)
    if slave is not None:
        os.close(slave)
    if opts.pid_file:
        from scrun_py.container.spool import write_pid_file

        write_pid_file(opts.pid_file, pid)
    return 0


def console(proc: Process, console_socket: str | None) -> int | None:
    """With a terminal: the pty slave for srun, its master sent to `console_socket`
    (None: srun's own --pty on our terminal)."""
    if proc.terminal and console_socket:
        from scrun_py.anchor.console import open_pty, send_master

        master, slave, name = open_pty()
        try:
            send_master(console_socket, master, name)
        finally:
            os.close(master)
        return slave
    if proc.terminal and not os.isatty(0):
        raise ScrunError("process.terminal is true but no --console-socket was given")
    return None
