"""SCRUN_* input variables → salloc/srun options (the table of Slurm's scrun(1) INPUT
ENVIRONMENT VARIABLES).  Pure, except for the one warning logged for each variable
that is read but ignored (IGNORED says why).

Slurm applies every variable as the environment form of a salloc option; the
ones that only exist for srun make Slurm's anchor fatal.  We apply those to the
container step instead, which is what a user setting them means.
"""

from __future__ import annotations

from scrun_py.base.records import NamedTuple

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Literal
    Where = Literal["alloc", "step", "removed"]


class Opt(NamedTuple):
    option: str
    where: Where = "alloc"
    flag: bool = False


SCRUN_OPTIONS: dict[str, Opt] = {
    "SCRUN_ACCOUNT": Opt("--account"),
    "SCRUN_ACCTG_FREQ": Opt("--acctg-freq"),
    "SCRUN_BURST_BUFFER": Opt("--bb"),
    "SCRUN_CLUSTER_CONSTRAINT": Opt("--cluster-constraint"),
    "SCRUN_CLUSTERS": Opt("--clusters"),
    "SCRUN_CONSTRAINT": Opt("--constraint"),
    "SCRUN_CORE_SPEC": Opt("--core-spec"),
    "SCRUN_CPU_BIND": Opt("--cpu-bind", "step"),
    "SCRUN_CPU_FREQ_REQ": Opt("--cpu-freq"),
    "SCRUN_CPUS_PER_GPU": Opt("--cpus-per-gpu"),
    "SCRUN_CPUS_PER_TASK": Opt("--cpus-per-task"),
    "SCRUN_DELAY_BOOT": Opt("--delay-boot"),
    "SCRUN_DEPENDENCY": Opt("--dependency"),
    "SCRUN_DISTRIBUTION": Opt("--distribution"),
    "SCRUN_EPILOG": Opt("--epilog", "step"),
    "SCRUN_EXACT": Opt("--exact", "step", flag=True),
    "SCRUN_EXCLUSIVE": Opt("--exclusive", flag=True),
    "SCRUN_GPU_BIND": Opt("--gpu-bind"),
    "SCRUN_GPU_FREQ": Opt("--gpu-freq"),
    "SCRUN_GPUS": Opt("--gpus"),
    "SCRUN_GPUS_PER_NODE": Opt("--gpus-per-node"),
    "SCRUN_GPUS_PER_SOCKET": Opt("--gpus-per-socket"),
    "SCRUN_GPUS_PER_TASK": Opt("--gpus-per-task"),
    "SCRUN_GRES_FLAGS": Opt("--gres-flags"),
    "SCRUN_GRES": Opt("--gres"),
    "SCRUN_HINT": Opt("--hint"),
    "SCRUN_JOB_NAME": Opt("--job-name"),
    "SCRUN_JOB_NODELIST": Opt("--nodelist"),
    "SCRUN_JOB_NUM_NODES": Opt("--nodes"),
    "SCRUN_LABELIO": Opt("--label", "step", flag=True),
    # not in Slurm's table: licenses (and hierarchical resources built on them)
    "SCRUN_LICENSES": Opt("--licenses"),
    "SCRUN_MEM_BIND": Opt("--mem-bind"),
    "SCRUN_MEM_PER_CPU": Opt("--mem-per-cpu"),
    "SCRUN_MEM_PER_GPU": Opt("--mem-per-gpu"),
    "SCRUN_MEM_PER_NODE": Opt("--mem"),
    "SCRUN_MPI_TYPE": Opt("--mpi", "step"),
    "SCRUN_NCORES_PER_SOCKET": Opt("--cores-per-socket"),
    "SCRUN_NETWORK": Opt("--network"),
    "SCRUN_NSOCKETS_PER_NODE": Opt("--sockets-per-node"),
    "SCRUN_NTASKS": Opt("--ntasks"),
    "SCRUN_NTASKS_PER_CORE": Opt("--ntasks-per-core"),
    "SCRUN_NTASKS_PER_GPU": Opt("--ntasks-per-gpu"),
    "SCRUN_NTASKS_PER_NODE": Opt("--ntasks-per-node"),
    "SCRUN_NTASKS_PER_TRES": Opt("--ntasks-per-tres"),
    "SCRUN_OPEN_MODE": Opt("--open-mode", "step"),
    "SCRUN_OVERCOMMIT": Opt("--overcommit", flag=True),
    "SCRUN_OVERLAP": Opt("--overlap", "step", flag=True),
    "SCRUN_PARTITION": Opt("--partition"),
    "SCRUN_POWER": Opt("--power", "removed"),
    "SCRUN_PROFILE": Opt("--profile"),
    "SCRUN_PROLOG": Opt("--prolog", "step"),
    "SCRUN_QOS": Opt("--qos"),
    "SCRUN_REMOTE_CWD": Opt("--chdir"),
    "SCRUN_REQ_SWITCH": Opt("--switches"),
    "SCRUN_RESERVATION": Opt("--reservation"),
    "SCRUN_SIGNAL": Opt("--signal"),
    "SCRUN_SLURMD_DEBUG": Opt("--slurmd-debug", "step"),
    "SCRUN_SPREAD_JOB": Opt("--spread-job", flag=True),
    "SCRUN_TASK_EPILOG": Opt("--task-epilog", "step"),
    "SCRUN_TASK_PROLOG": Opt("--task-prolog", "step"),
    "SCRUN_THREAD_SPEC": Opt("--thread-spec"),
    "SCRUN_THREADS_PER_CORE": Opt("--threads-per-core"),
    "SCRUN_THREADS": Opt("--threads", "step"),
    "SCRUN_TIMELIMIT": Opt("--time"),
    "SCRUN_TRES_BIND": Opt("--tres-bind"),
    "SCRUN_TRES_PER_TASK": Opt("--tres-per-task"),
    "SCRUN_UNBUFFEREDIO": Opt("--unbuffered", "step", flag=True),
    "SCRUN_USE_MIN_NODES": Opt("--use-min-nodes", flag=True),
    "SCRUN_WAIT4SWITCH": Opt("--switches"),
    "SCRUN_WCKEY": Opt("--wckey"),
    "SCRUN_WORKING_DIR": Opt("--chdir"),
}

# config.json annotations that stand for a SCRUN_* variable (the variable wins)
ANNOTATION_OPTIONS: dict[str, str] = {"org.scrun-py.licenses": "SCRUN_LICENSES"}

# The container's step is named `scrun`, as Slurm's scrun names it (the backends find
# the step by this name).  The job is named after the container (job_name below).
JOB_NAME = "scrun"
# slurmctld refuses a longer job name
MAX_JOB_NAME = 1024
# salloc reads the job's container id from this variable (Slurm >= 23.02, the release
# that added --container-id; 22.05's salloc ignores it): the container id Slurm's scrun
# sets on its job, which `squeue -O ContainerId` shows
CONTAINER_ID_ENV = "SALLOC_CONTAINER_ID"
# Variables that are read and then ignored, with the reason the warning gives.
IGNORED: dict[str, str] = {
    "SCRUN_JOB_NAME": ("not a job name Slurm takes (empty, a control character, or longer "
                       f"than {MAX_JOB_NAME} bytes): the job is named after the container"),
    "SCRUN_POWER": "salloc has no --power option any more (Slurm removed it)",
}
_EXCLUSIVE_VALUES = ("user", "mcs", "topo")


def flag_is_set(value: str) -> bool:
    """Slurm's env-flag rule: empty, `yes` or a non-zero integer means set."""
    v = value.strip().lower()
    if v in ("", "yes"):
        return True
    try:
        return int(v) != 0
    except ValueError:
        return False


class JobOptions:
    def __init__(self, alloc: list[str] | None = None, step: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.alloc = alloc or []
        self.step = step or []
        # added to salloc's environment (CONTAINER_ID_ENV)
        self.env = env or {}
        # read and not applied: never dropped silently, the anchor logs `ignored_warning`
        self.ignored: list[str] = []


def ignored_warning(name: str) -> str:
    """The warning naming an ignored variable and why."""
    return f"{name} is ignored: {IGNORED.get(name, 'not supported')}"


def job_name_problem(name: str) -> str:
    """Why Slurm would refuse `name` as a job name, or ''."""
    if not name.strip():
        return "empty"
    if len(name.encode(errors="surrogateescape")) > MAX_JOB_NAME:
        return f"longer than {MAX_JOB_NAME} bytes"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a control character"
    return ""


def job_name(environ: dict[str, str], container_id: str) -> str:
    """The job's name: SCRUN_JOB_NAME when it is a name Slurm takes, else the container's
    id (a valid container id always is: container/record.py), else `scrun` (no id)."""
    wanted = environ.get("SCRUN_JOB_NAME")
    if wanted is not None and not job_name_problem(wanted):
        return wanted
    return container_id or JOB_NAME


def job_options(environ: dict[str, str], container_id: str = "") -> JobOptions:
    """Translate SCRUN_* variables of `environ` into salloc and srun options; the job is
    named and tagged after `container_id` (job_name, CONTAINER_ID_ENV)."""
    out = JobOptions()
    name = job_name(environ, container_id)
    if name != JOB_NAME:  # salloc's argv names the job `scrun` otherwise (slurm/argv.py)
        out.alloc.append(f"--job-name={name}")
    if container_id:
        out.env[CONTAINER_ID_ENV] = container_id
    chdir: str | None = None
    switches: str | None = environ.get("SCRUN_REQ_SWITCH")
    wait4 = environ.get("SCRUN_WAIT4SWITCH")
    for name in sorted(SCRUN_OPTIONS):
        if name not in environ:
            continue
        opt, value = SCRUN_OPTIONS[name], environ[name]
        if name == "SCRUN_JOB_NAME":
            if job_name_problem(value):  # named after the container (job_name)
                out.ignored.append(name)
            continue
        if name in ("SCRUN_REMOTE_CWD", "SCRUN_WORKING_DIR"):
            continue
        if name in ("SCRUN_REQ_SWITCH", "SCRUN_WAIT4SWITCH"):
            continue
        if opt.where == "removed":
            out.ignored.append(name)
            continue
        target = out.alloc if opt.where == "alloc" else out.step
        if name == "SCRUN_EXCLUSIVE" and value.strip().lower() in _EXCLUSIVE_VALUES:
            target.append(f"{opt.option}={value.strip().lower()}")
        elif opt.flag:
            if flag_is_set(value):
                target.append(opt.option)
        else:
            target.append(f"{opt.option}={value}")
    # WORKING_DIR is applied after REMOTE_CWD in Slurm, so it wins.
    for name in ("SCRUN_REMOTE_CWD", "SCRUN_WORKING_DIR"):
        if environ.get(name):
            chdir = environ[name]
    if chdir:
        out.alloc.append(f"--chdir={chdir}")
    if switches or wait4:
        spec = switches or "1"
        out.alloc.append(f"--switches={spec}@{wait4}" if wait4 else f"--switches={spec}")
    return out
