"""`start`: ask the anchor to launch the container step."""

from __future__ import annotations

from scrun_py import audit, client, store
from scrun_py.errors import AnchorUnreachable, ScrunError
from scrun_py.settings import Invocation
from scrun_py.status import Status


def run(inv: Invocation, container_id: str) -> None:
    record = store.load(inv.root, container_id)
    status = store.effective_status(record)
    if status is Status.STOPPED:
        raise ScrunError("cannot start a container that has stopped")
    if status is Status.RUNNING:
        raise ScrunError("cannot start an already running container")
    try:
        client.request(inv.root, container_id, "start", timeout_s=600)
    except AnchorUnreachable as exc:
        raise ScrunError("cannot start a container that has stopped") from exc
    audit.emit(inv.slurm_conf_path(), "start", container_id=container_id,
               job_id=record.job_id or None, bundle=record.bundle)
