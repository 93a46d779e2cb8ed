"""`ps [--format table|json] ID`: the container's processes, as the node's runtime sees
them.

The container runs on a compute node: a helper step of one task beside it (`srun
--jobid J --overlap`) runs the node's runtime, `<runtime and its global options> ps
--format json <container id on the node>`, both taken from oci.conf's RunTimeKill
(slurm/argv.node_runtime_command).  The pids are the node's, in its pid namespace: on
the login node they name other processes, or none.  `json` prints runc's JSON array of
pids; `table` prints crun's table (a `PID` header, one pid a line), not runc's `ps -ef`
rows, which would need ps run on the node.
"""

from __future__ import annotations

import os
import sys

from scrun_py.base.errors import ContainerNotRunning, ScrunError
from scrun_py.base.layout import RUNNING
from scrun_py.container.handle import Container

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from scrun_py.base.invocation import Invocation
    from scrun_py.container.record import ContainerRecord

STEP_TIMEOUT_S = 60.0  # for the node's answer


class NodeTarget:
    """Where and how to reach a running container's runtime on its node."""

    def __init__(self, inv: Invocation, record: ContainerRecord, *, verb: str,
                 runtime: str | None = None) -> None:
        from scrun_py.site.oci_settings import read_settings

        settings = read_settings(inv.slurm_conf_file())
        kill = settings["runtime_kill"]
        if not kill or settings["ignore_file_config_json"]:
            raise ScrunError(f"{verb} needs oci.conf's RunTimeKill to be a crun or runc "
                             "command line (and IgnoreFileConfigJson off)")
        self.inv = inv
        self.record = record
        self.srun_path: str = settings["srun_path"]
        self.srun_args: list[str] = list(settings["srun_args"])
        self.verb = verb
        from scrun_py.slurm.node_step import NodeRuntime

        self.runtime = NodeRuntime(kill, job_id=record.job_id, step_id=self.step_id(),
                                   runtime=runtime)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = self.inv.slurm_conf_file()
        return env

    def step_id(self) -> int:
        """The container step's id: the record's, else squeue's."""
        if self.record.step_id is not None:
            return self.record.step_id
        from scrun_py.slurm.node_step import container_step_id

        found = container_step_id(self.record.job_id, self.env())
        if found is None:
            raise ContainerNotRunning()
        return found

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
        from scrun_py.oci.taskenv import LayoutError, expand_hostlist
        from scrun_py.slurm.node_step import step_nodelist

        text = step_nodelist(self.record.job_id, self.runtime.step_id, self.env())
        if text is None:
            return None
        try:
            return text, expand_hostlist(text)
        except LayoutError:
            return text, []

    def step_argv(self, command: str, *, pty: bool = False,
                  nodelist: str | None = None) -> list[str]:
        """srun's argv on `nodelist`, by default the first node of the container's step,
        where its task 0 runs (`--relative=0` when squeue does not say: on 24.11 srun
        did not always honour it); as root of a user namespace (rootless podman) behind
        the anchor's `unshare` prefix, so that Slurm sees the real uid.  srun and unshare
        are named by their absolute paths (procs.resolve_program): unshare would look
        srun up in PATH, whose empty or relative entries name the caller's directory."""
        from scrun_py.anchor.launch import userns_prefix
        from scrun_py.base import procs
        from scrun_py.slurm.node_step import step_argv

        if nodelist is None:
            found = self.step_nodes()
            nodelist = found[1][0] if found and found[1] else None
        try:
            prefix = userns_prefix()
            srun = procs.resolve_program(self.srun_path, self.env())
        except OSError as exc:
            raise ScrunError(f"{self.verb}: cannot run {exc.filename}: "
                             f"{exc.strerror}") from None
        return [*prefix, *step_argv(self.record.job_id, command, srun=[srun, *self.srun_args],
                                    name=f"scrun-{self.verb}", pty=pty, nodelist=nodelist)]


def running_record(inv: Invocation, container_id: str) -> ContainerRecord:
    """The record of a running container; runc's `container not running` otherwise."""
    with Container(inv.root_dir, container_id) as container:
        record = container.record()
        if container.status(record) != RUNNING:
            raise ContainerNotRunning()
    return record


def pids(inv: Invocation, container_id: str) -> list[int]:
    import subprocess

    from scrun_py.base import procs
    from scrun_py.slurm.node_step import ps_script

    target = NodeTarget(inv, running_record(inv, container_id), verb="ps")
    argv = target.step_argv(target.derived(lambda: ps_script(target.runtime)))
    try:
        # argv[0] is absolute (step_argv): resolve_program returns it, checked
        res = subprocess.run(argv, executable=procs.resolve_program(argv[0], target.env()),
                             env=target.env(), capture_output=True, text=True,
                             timeout=STEP_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise ScrunError(f"ps: no answer from the node in {STEP_TIMEOUT_S:.0f}s") from None
    except OSError as exc:
        raise ScrunError(f"ps: cannot run {argv[0]}: {exc.strerror}") from None
    if res.returncode != 0:
        raise ScrunError(f"ps: {step_error(res.stderr, res.returncode)}")
    return parse_pids(res.stdout)


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


def render(found: list[int], fmt: str) -> str:
    if fmt == "json":
        import json

        return json.dumps(found, separators=(",", ":")) + "\n"
    if fmt != "table":
        raise ScrunError(f"invalid format option: {fmt}")
    return "PID\n" + "".join(f"{pid}\n" for pid in found)


def run(inv: Invocation, container_id: str, fmt: str = "table") -> None:
    sys.stdout.write(render(pids(inv, container_id), fmt))
