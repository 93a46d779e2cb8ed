"""The OCI `state` document printed by `scrun-py state`.  Pure."""

from __future__ import annotations

from scrun_py import fastjson
from scrun_py.status import Status

TYPE_CHECKING = False  # `state` imports this module: typing only for mypy
if TYPE_CHECKING:
    from typing import Any


def state_document(*, oci_version: str, container_id: str, status: Status, pid: int,
                   bundle: str, rootfs: str, created: str, owner: str,
                   annotations: dict[str, str]) -> dict[str, Any]:
    """Keys in Slurm's order, then runc's extras; pid is 0 once stopped."""
    return {
        "ociVersion": oci_version,
        "id": container_id,
        "status": status.value,
        "pid": 0 if status is Status.STOPPED else pid,
        "bundle": bundle,
        "annotations": annotations,
        "rootfs": rootfs,
        "created": created,
        "owner": owner,
    }


def render(doc: dict[str, Any]) -> str:
    """One line of compact JSON (Slurm 25.05+ prints compact JSON)."""
    return fastjson.dumps(doc)
