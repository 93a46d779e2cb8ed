"""`kill [--all] [--regex] ID [SIGNAL]`: signal the container (through its job).

`--all` changes nothing (the table in base/flags.py says where the signal goes).
"""

from __future__ import annotations

from scrun_py.base.errors import AnchorUnreachable, ContainerNotRunning, ScrunError
from scrun_py.base.layout import STOPPED
from scrun_py.base.signames import parse_signal
from scrun_py.commands import audited
from scrun_py.container.handle import KILL_TIMEOUT_S, Container

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.base.invocation import Invocation


def run(inv: Invocation, container_id: str, signal: str | None) -> None:
    sig = parse_signal(signal or "TERM")
    container = Container(inv.root_dir, container_id)
    record = container.record()
    if container.status(record) == STOPPED:
        raise ContainerNotRunning()

    def kill() -> None:
        try:
            container.request("kill", KILL_TIMEOUT_S, signal=sig)
        except AnchorUnreachable as exc:
            raise ContainerNotRunning() from exc

    audited(inv, "kill", kill, container_id=container_id, job_id=record.job_id or None,
            bundle=record.bundle, signal=sig)


def run_matching(inv: Invocation, pattern: str, signal: str | None) -> None:
    """crun's `kill --regex`: signal every container whose id matches; a container that
    fails is a warning on stderr, not a failure of the command."""
    from scrun_py.container import spool

    parse_signal(signal or "TERM")
    for container_id in spool.matching_ids(inv.root_dir, pattern):
        try:
            run(inv, container_id, signal)
        except ScrunError as exc:
            inv.note("warning", f"kill {container_id}: {exc}", container_id=container_id)
