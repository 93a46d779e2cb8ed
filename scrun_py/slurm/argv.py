"""Pure argv builders for the Slurm commands scrun-py runs (golden-tested)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from scrun_py.slurm.options import JOB_NAME

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.slurm.backend import StepRequest

ABANDON_ENV = "SCRUN_PY_ON_ABANDON"
READY_MARKER = b"\0SCRUN-PY-READY\0"

# Which program a shell runs.  A command word without a '/' is looked up in PATH, and an
# empty or relative PATH entry names the shell's working directory: for the job's
# shells, a directory the image chooses (SCRUN_WORKING_DIR), where another user may have
# left a program named `env`.  So:
#
# * a shell scrun-py runs on the login node (the allocation's holder, the abandon
#   script) names every program by the absolute path `procs.resolve_program` found
#   (absolute PATH entries only), passed to the builder here; its other words are
#   shell builtins (printf, read, exit, [, cd, exec);
# * a shell run on a compute node (`srun … /bin/sh -c CMD`: build_command_step_argv,
#   build_node_step_argv) starts with NODE_PATH_PROLOGUE: PATH keeps only the absolute
#   entries of the node's PATH, so the programs of CMD (the runtime of RunTimeKill, id,
#   sed, a Lua remote command's) are found in absolute directories of the node.

#: what every shell scrun-py runs on a compute node starts with: PATH becomes its
#: absolute entries (os.defpath's /bin:/usr/bin when none is left), with builtins only
NODE_PATH_PROLOGUE = ('_r=$PATH: _p=; while [ -n "$_r" ]; do _d=${_r%%:*}; _r=${_r#*:}; '
                      'case $_d in /*) _p=$_p${_p:+:}$_d;; esac; done; '
                      'PATH=${_p:-/bin:/usr/bin}; export PATH; unset _r _p _d; ')


def node_script(command: str) -> str:
    """`command` as a compute node's shell runs it: after NODE_PATH_PROLOGUE."""
    return NODE_PATH_PROLOGUE + command


def _absolute(path: str, what: str) -> str:
    """`path`, shell-quoted; ValueError unless it is absolute (a resolved program)."""
    if not path.startswith("/"):
        raise ValueError(f"{what} must be an absolute path (a resolved program): {path!r}")
    return sh_quote(path)


_SH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_")


def sh_quote(word: str) -> str:
    """shlex.quote without shlex, which imports re: the holder script is built before
    salloc is spawned, on `create`'s critical path (base/lean.py)."""
    if word and all(c in _SH_SAFE for c in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def holder_script(env_path: str) -> str:
    """The allocation's "shell", run by salloc on the login node: report the job
    environment on stdout (`env_path -0`, env's absolute path), then wait for the anchor
    to write the container's exit code on stdin and exit with it, so salloc completes
    the job as COMPLETED or FAILED with that code.  If the anchor dies, stdin reaches EOF:
    the holder runs the anchor's "on abandon" script (it kills the container through the
    runtime, written once the step runs) and exits 1, so salloc relinquishes the job
    (FAILED) and no orphan job or container is left.  It does not scancel its own job:
    a salloc 22.05 whose holder did that was seen left behind, spinning in wait4()
    (ECHILD) at 100% CPU after the job had ended."""
    return (f'{_absolute(env_path, "env")} -0; printf "\\0SCRUN-PY-READY\\0"; '
            'if ! read rc; then '
            '[ -r "$SCRUN_PY_ON_ABANDON" ] && /bin/sh "$SCRUN_PY_ON_ABANDON"; '
            'rc=1; fi; exit "${rc:-1}"')


def build_salloc_argv(alloc_opts: Sequence[str], env_path: str,
                      salloc: str = "salloc") -> list[str]:
    """salloc running holder_script (`env_path`: env's absolute path); salloc itself is
    resolved by procs.spawn.  The job is named `scrun` unless `alloc_opts` name it."""
    named = any(opt.startswith("--job-name=") for opt in alloc_opts)
    return [salloc, *(() if named else (f"--job-name={JOB_NAME}",)), *alloc_opts, "--",
            "/bin/sh", "-c", holder_script(env_path)]


def build_srun_argv(req: StepRequest, *, srun_path: str = "srun",
                    srun_args: Sequence[str] = (), container_id_flag: bool = True) -> list[str]:
    """The container step: slurmstepd runs the OCI runtime from oci.conf on the bundle
    (of `req`, only its job_id, container_id, bundle, args, step_opts and pty)."""
    argv = [srun_path, *srun_args, f"--jobid={req.job_id}", f"--job-name={JOB_NAME}",
            "--no-kill", "--quiet"]
    if container_id_flag:
        argv.append(f"--container-id={req.container_id}")
    argv += [f"--container={req.bundle}", "--export=NONE"]
    if req.pty:
        argv.append("--pty")
    argv += [*req.step_opts, "--", *req.args]
    return argv


#: srun takes the job's task count from these as `--ntasks`: a job of two tasks per node
#: would then run a helper step's command twice on each node, `--ntasks-per-node=1`
#: notwithstanding (srun warns that it cannot honour it and ignores it)
TASK_COUNT_ENV = ("SLURM_NTASKS", "SLURM_NPROCS")


def build_command_step_argv(*, job_id: int, command: str, env_path: str,
                            srun: Sequence[str], name: str = "lua-command",
                            overlap: bool = True) -> list[str]:
    """A helper step of one task on every node of the job running `/bin/sh -c command`
    (after NODE_PATH_PROLOGUE), whatever task count the job environment it runs in gives
    (TASK_COUNT_ENV).  `env_path` and `srun` (SrunPath, then SrunArgs) name their
    programs by absolute path: env runs srun without looking in PATH then, wherever the
    argv runs (the abandon script runs in the job's working directory)."""
    _absolute(env_path, "env")
    _absolute(srun[0], "srun")
    unset = [word for var in TASK_COUNT_ENV for word in ("-u", var)]
    argv = [env_path, *unset, *srun, f"--jobid={job_id}",
            f"--job-name={name}", "--no-kill", "--quiet", "--ntasks-per-node=1"]
    if overlap:
        argv.append("--overlap")
    return [*argv, "--", "/bin/sh", "-c", node_script(command)]


def build_scancel_argv(job_id: int, *, signal: int | None = None, full: bool = False,
                       step_id: int | None = None) -> list[str]:
    argv = ["scancel"]
    if signal is not None:
        argv.append(f"--signal={signal}")
    if full:
        argv.append("--full")
    argv.append(f"{job_id}.{step_id}" if step_id is not None else str(job_id))
    return argv


def build_version_argv(srun_path: str = "srun") -> list[str]:
    """The Slurm release of the client commands (parsed by parse.parse_version)."""
    return [srun_path, "--version"]


def build_step_nodes_argv(job_id: int, step_id: int) -> list[str]:
    """The nodes of one step, as a host list (`n[1-3]`)."""
    return ["squeue", "--noheader", f"--steps={job_id}.{step_id}", "--format=%N"]


def build_step_list_argv(job_id: int) -> list[str]:
    return ["squeue", "--noheader", "--steps", f"--jobs={job_id}", "--format=%i|%j"]


def build_job_state_argv(job_id: int) -> list[str]:
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%T"]


def build_job_info_argv(job_id: int) -> list[str]:
    """End time, uid and gid of a job in one query: `END|UID|GID`."""
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%e|%U|%G"]


def build_job_reason_argv(job_id: int) -> list[str]:
    """A job's state and Slurm's reason for it (why a pending job waits): `STATE|REASON`."""
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%T|%r"]


def node_pattern_values(job_id: int, step_id: int, task: str = "0") -> dict[str, str]:
    """What each token of oci.conf's RunTimeKill (an OCI pattern: `%j`, `%s`, `%t`, `%n`,
    `%u`, `%U`, `%%`) becomes in a shell command run on the container's node: the job and
    step ids as numbers, the task id `task` (a shell word: `"$t"` in a loop over the
    node's tasks), the node name and the user as the node's shell expands them."""
    return {"%": "%", "j": str(job_id), "s": str(step_id), "t": task,
            "n": '"${SLURMD_NODENAME}"', "u": '"$(id -un)"', "U": '"$(id -u)"'}


def expand_pattern(pattern: str, values: Mapping[str, str]) -> str:
    """`pattern` with each `%x` token replaced by `values[x]` (pure: the one expansion of
    RunTimeKill, for signal_shell_command and node_runtime_command).  ValueError naming
    the token (`%x`) when `x` has no value, `%` alone when the pattern ends in a lone `%`
    (slurmstepd's expansion rejects both)."""
    out: list[str] = []
    i = 0
    while (j := pattern.find("%", i)) != -1:
        token = pattern[j + 1:j + 2]
        if token not in values:
            raise ValueError(f"%{token}")
        out += (pattern[i:j], values[token])
        i = j + 2
    out.append(pattern[i:])
    return "".join(out)


#: what the marked signal command prints for each container that took the signal
SIGNAL_MARK = "scrun-signal-ok"


def signal_shell_command(kill_pattern: str, *, job_id: int, step_id: int, signal: int,
                         tasks_per_node: int = 1,
                         done: Collection[str] | None = None) -> str:
    """Deliver `signal` to the container through the runtime's own kill command.

    oci.conf's RunTimeKill (e.g. `crun … kill -a %n.%u.%j.%s.%t`) names the
    container; we append the signal number and drop `-a`/`--all`, because the
    engine's `kill` means the container's init (and crun's --all silently signals
    nothing for rootless containers without a cgroup).  Node-local values are
    expanded by the shell on the node.  (Slurm turns every step signal into
    kill+delete for container steps, so a trap in the container would never run.)
    With several tasks on a node each has its own container (`%t` is the node-local
    task id): the command then loops over them and succeeds if any took the signal.

    `done` (the marked form, for retries): the `NODE:TASK` containers that took the
    signal in an earlier attempt.  Those are skipped, so a retry never signals a
    container twice (a second TERM would run its trap twice), and each container that
    takes the signal now prints `SIGNAL_MARK NODE:TASK` (parse.signal_marks reads it).
    A node where any container has taken the signal, now or before, succeeds.
    """
    kill_pattern = " ".join(w for w in kill_pattern.split() if w not in ("-a", "--all"))
    task = "0" if tasks_per_node <= 1 and done is None else '"$t"'
    cmd = expand_pattern(kill_pattern, node_pattern_values(job_id, step_id, task)) + f" {signal}"
    ids = " ".join(str(t) for t in range(max(tasks_per_node, 1)))
    if done is not None:
        return _marked_signal_loop(cmd, ids, done)
    if tasks_per_node <= 1:
        return cmd
    return f"rc=1; for t in {ids}; do {cmd} && rc=0; done; exit $rc"



def _marked_signal_loop(cmd: str, ids: str, done: Collection[str]) -> str:
    """signal_shell_command's marked form: `cmd` for each task id not in `done`."""
    import shlex

    skip = shlex.quote(" " + " ".join(sorted(done)) + " ")
    here = '"${SLURMD_NODENAME}:$t"'
    return (f"d={skip}; rc=1; for t in {ids}; do "
            f'case "$d" in *" "{here}" "*) rc=0; continue;; esac; '
            f"{cmd} && {{ rc=0; echo {SIGNAL_MARK} {here}; }}; done; exit $rc")


#: the Slurm client commands scrun-py runs (doctor checks that each is on PATH)
CLIENT_COMMANDS = ("salloc", "srun", "scancel", "squeue", "sinfo")


def build_ping_argv(scontrol: str = "scontrol") -> list[str]:
    """Whether slurmctld answers (parsed by parse.parse_ping)."""
    return [scontrol, "ping"]


#: doctor's staging probe, on the node: for each marker file given, `unseen N` when the
#: node does not see it and `unwritable N` when it cannot write the marker's directory (N:
#: the marker's place, from 1), then `node NAME`.  Shell builtins only.
STAGING_PROBE_SCRIPT = ('i=0; for m do i=$((i+1)); if [ ! -e "$m" ]; then echo "unseen $i"; '
                        'elif [ ! -w "${m%/*}" ]; then echo "unwritable $i"; fi; done; '
                        'echo "node ${SLURMD_NODENAME:-unknown}"')


def build_staging_probe_argv(markers: list[str], immediate_s: int = 10) -> list[str]:
    """One short step on one node (a job of its own: a minute's limit, and no more than
    `immediate_s` of waiting for a node) that looks for doctor's marker files."""
    return ["srun", "--nodes=1", "--ntasks=1", "--time=1", f"--immediate={immediate_s}",
            "--job-name=scrun-py-doctor", "--quiet", "/bin/sh", "-c",
            node_script(STAGING_PROBE_SCRIPT), "sh", *markers]


#: the runtimes whose command line a node runtime command is derived from
NODE_RUNTIMES = ("crun", "runc")


def node_runtime_command(kill_pattern: str, words: Sequence[str], *, job_id: int,
                         step_id: int) -> str:
    """A shell command running the node's OCI runtime on the container: `words` (a verb
    and its options, already shell-quoted) between the runtime and its global options
    and the container's id on the node, both taken from oci.conf's RunTimeKill (e.g.
    `crun --root=/run/crun-%u kill %n.%u.%j.%s.%t` + `ps --format json` →
    `crun --root=/run/crun-"$(id -un)" ps --format json "${SLURMD_NODENAME}".…`).
    The tokens are expanded as signal_shell_command expands them, for task 0.
    ValueError when RunTimeKill is no crun or runc command line with a `kill` verb
    and a container id, or holds a token this cannot expand."""
    parts = kill_pattern.split()
    first = 1 if parts[:1] == ["exec"] else 0
    if len(parts) <= first or parts[first].rsplit("/", 1)[-1] not in NODE_RUNTIMES:
        raise ValueError("RunTimeKill does not run crun or runc")
    if "kill" not in parts:
        raise ValueError("RunTimeKill has no kill verb")
    verb = parts.index("kill")
    ids = [w for w in parts[verb + 1:] if "%" in w]
    if not ids:
        raise ValueError("RunTimeKill names no container id pattern")
    pattern = " ".join([*parts[first:verb], *words, ids[-1]])
    return expand_pattern(pattern, node_pattern_values(job_id, step_id))


def build_node_step_argv(*, job_id: int, command: str, srun: Sequence[str] = ("srun",),
                         name: str = "scrun-ps", nodelist: str | None = None,
                         pty: bool = False) -> list[str]:
    """A helper step of one task beside the container's (`--overlap`), running
    `/bin/sh -c command` (after NODE_PATH_PROLOGUE) with `srun` (oci.conf's SrunPath and
    SrunArgs) on `nodelist`, by default on the job's first node (`--relative=0`), where
    the container's task 0 runs: srun's own choice of one node is not that node (on a
    3-node job it chose the second node for every such step after the first)."""
    argv = [*srun, f"--jobid={job_id}", f"--job-name={name}", "--overlap",
            "--quiet", "--nodes=1", "--ntasks=1"]
    argv.append(f"--nodelist={nodelist}" if nodelist else "--relative=0")
    if pty:
        argv.append("--pty")
    return [*argv, "--", "/bin/sh", "-c", node_script(command)]
