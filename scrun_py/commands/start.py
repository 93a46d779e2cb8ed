"""`start ID`: ask the anchor to launch the container step."""

from __future__ import annotations

from scrun_py.base.errors import AnchorUnreachable, CannotStart
from scrun_py.base.layout import RUNNING, STOPPED
from scrun_py.commands import audited
from scrun_py.container.handle import START_TIMEOUT_S, Container

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.base.invocation import Invocation


def run(inv: Invocation, container_id: str) -> None:
    container = Container(inv.root_dir, container_id)
    record = container.record()
    status = container.status(record)
    if status == STOPPED:
        raise CannotStart(CannotStart.STOPPED)
    if status == RUNNING:
        raise CannotStart(CannotStart.RUNNING)

    def start() -> None:
        try:
            container.request("start", START_TIMEOUT_S)
        except AnchorUnreachable as exc:
            raise CannotStart(CannotStart.STOPPED) from exc

    audited(inv, "start", start, container_id=container_id, job_id=record.job_id or None,
            bundle=record.bundle)
