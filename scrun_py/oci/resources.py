"""What a container asks of its engine, read from config.json, as its Slurm job's request.

docker and podman write `--cpus`, `--cpuset-cpus`, `--memory` and `--memory-reservation`
into `linux.resources`; on a cluster they mean the job's CPUs and memory, not a cgroup of
the login node.  `engine_request` maps them to the SCRUN_* variables of the same request
(slurm/options.py turns those into salloc options), so that a variable the user or the
site set explicitly can win over them (`apply_engine_request`).  Pure: no I/O, no logging.

- CPUs: ceil(quota / period) (`--cpus 1.5` asks for 2); else the number of CPUs a cpuset
  names (`--cpuset-cpus 0-1`: 2), never the ids, which are the login node's;
- memory: the limit in MiB, rounded up (`--memory 512m`: 512M), else the reservation;
  `memory.swap` is not read: engines write twice the limit whether or not it was asked.
`cpu.shares`, `pids.limit` (podman always writes one) and the rest ask nothing of Slurm.
"""

from __future__ import annotations

from scrun_py.base.records import NamedTuple

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

MIB = 1 << 20
#: the request variables and the engine flags they come from (for the log and errors)
CPUS_VAR, MEM_VAR = "SCRUN_CPUS_PER_TASK", "SCRUN_MEM_PER_NODE"
#: explicit variables that already say how many CPUs or how much memory the job gets
#: (Slurm takes only one way of asking for memory: --mem, --mem-per-cpu, --mem-per-gpu)
CPU_VARS = (CPUS_VAR, "SCRUN_CPUS_PER_GPU")
MEM_VARS = (MEM_VAR, "SCRUN_MEM_PER_CPU", "SCRUN_MEM_PER_GPU")


class Requested(NamedTuple):
    """One request variable, its value and the engine flag it comes from."""

    var: str
    value: str
    source: str  # e.g. "--cpus (cpu.quota 150000 / cpu.period 100000)"


class Override(NamedTuple):
    """An engine request not applied because an explicit variable says otherwise."""

    requested: Requested
    explicit: str  # the variable that won
    value: str


def _int(value: object) -> int | None:
    """A positive integer config value (bool is not one), else None."""
    if type(value) is int and value > 0:
        return value
    return None


def cpuset_count(cpus: str) -> int:
    """How many CPUs a cpuset list names ("0-3,8" is 5); 0 when it is not one."""
    seen: set[int] = set()
    for part in cpus.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            return 0
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            return 0
        seen.update(range(first, last + 1))
    return len(seen)


def _cpus(cpu: dict[str, Any]) -> Requested | None:
    quota, period = _int(cpu.get("quota")), _int(cpu.get("period"))
    if quota and period:
        return Requested(CPUS_VAR, str(-(-quota // period)),
                         f"--cpus (cpu.quota {quota} / cpu.period {period})")
    cpus = cpu.get("cpus")
    if isinstance(cpus, str) and cpuset_count(cpus):
        return Requested(CPUS_VAR, str(cpuset_count(cpus)), f"--cpuset-cpus {cpus}")
    return None


def _memory(memory: dict[str, Any]) -> Requested | None:
    for key, flag in (("limit", "--memory"), ("reservation", "--memory-reservation")):
        size = _int(memory.get(key))
        if size:
            return Requested(MEM_VAR, f"{-(-size // MIB)}M", f"{flag} (memory.{key} {size})")
    return None


def engine_request(raw: dict[str, Any]) -> list[Requested]:
    """The job request `linux.resources` of config.json `raw` makes (empty: none)."""
    linux = raw.get("linux")
    resources = linux.get("resources") if isinstance(linux, dict) else None
    if not isinstance(resources, dict):
        return []
    out = []
    cpu, memory = resources.get("cpu"), resources.get("memory")
    if isinstance(cpu, dict) and (req := _cpus(cpu)):
        out.append(req)
    if isinstance(memory, dict) and (req := _memory(memory)):
        out.append(req)
    return out


def apply_engine_request(environ: dict[str, str], request: list[Requested]
                         ) -> tuple[dict[str, str], list[Override]]:
    """`environ` with the engine's request added where no explicit variable of the same
    kind is set (SCRUN_* of the caller, dockerd or `-e` win), and what they overrode."""
    out, overrides = dict(environ), []
    for req in request:
        kind = CPU_VARS if req.var == CPUS_VAR else MEM_VARS
        explicit = next((v for v in kind if environ.get(v, "") != ""), None)
        if explicit is None:
            out[req.var] = req.value
        else:
            overrides.append(Override(req, explicit, environ[explicit]))
    return out, overrides


def override_message(o: Override) -> str:
    """The log line saying an explicit variable won over an engine flag."""
    return (f"{o.explicit}={o.value} wins over the engine's {o.requested.source}, "
            f"which would ask for {o.requested.var}={o.requested.value}")
