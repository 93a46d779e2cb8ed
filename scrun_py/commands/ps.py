"""`ps [--format table|json] ID`: the container's processes, as the node's runtime sees
them.

The container runs on a compute node: a helper step of one task beside it (`srun
--jobid J --overlap`) runs the node's runtime, `<runtime and its global options> ps
--format json <container id on the node>`, both taken from oci.conf's RunTimeKill
(slurm/node_step.py `ps_pids`).  The pids are the node's, in its pid namespace, and
`docker top` looks them up in the login node's `ps -ef`: a pid is printed only when the
process with that pid here descends from a slurmstepd of the container's job (the node
is this machine), so that no login-node process is ever shown as the container's; on
a login node that is not a compute node of the job, ps prints none.  `json` prints
runc's JSON array of pids; `table` prints crun's table (a `PID` header, one pid a
line), not runc's `ps -ef` rows, which would need ps run on the node.
"""

from __future__ import annotations

import sys

from scrun_py.base.errors import ContainerNotRunning, ScrunError
from scrun_py.base.layout import RUNNING
from scrun_py.container.handle import Container

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.base.invocation import Invocation
    from scrun_py.container.record import ContainerRecord


def running_record(inv: Invocation, container_id: str) -> ContainerRecord:
    """The record of a running container; runc's `container not running` otherwise."""
    with Container(inv.root_dir, container_id) as container:
        record = container.record()
        if container.status(record) != RUNNING:
            raise ContainerNotRunning()
    return record


def pids(inv: Invocation, container_id: str) -> list[int]:
    from scrun_py.site.oci_settings import node_settings
    from scrun_py.slurm import node_step

    record = running_record(inv, container_id)
    settings = node_settings(inv.slurm_conf_file(), "ps")
    found = node_step.ps_pids(node_step.NodeTarget(settings, record.job_id, record.step_id,
                                                   verb="ps"))
    return of_job_here(found, record.job_id)


def of_job_here(found: list[int], job_id: int, proc: str = "/proc") -> list[int]:
    """The pids of `found` whose process here descends from a slurmstepd of the job
    `job_id` (`slurmstepd: [J.S]`, any step): the node's pids that name the same
    processes on this machine.  Another process given such a pid here is left out."""
    marker = f"slurmstepd: [{job_id}.".encode()
    return [pid for pid in found if _descends_from(pid, marker, proc)]


def _descends_from(pid: int, marker: bytes, proc: str) -> bool:
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            with open(f"{proc}/{pid}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"{proc}/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            return False
        if cmdline.startswith(marker):
            return True
        try:
            pid = int(stat.rpartition(b") ")[2].split()[1])
        except (ValueError, IndexError):
            return False
    return False


def render(found: list[int], fmt: str) -> str:
    if fmt == "json":
        import json

        return json.dumps(found, separators=(",", ":")) + "\n"
    if fmt != "table":
        raise ScrunError(f"invalid format option: {fmt}")
    return "PID\n" + "".join(f"{pid}\n" for pid in found)


def run(inv: Invocation, container_id: str, fmt: str = "table") -> None:
    sys.stdout.write(render(pids(inv, container_id), fmt))
