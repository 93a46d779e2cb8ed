"""The container record (`state.json`): written atomically by the anchor on every
transition, read by `state`, `delete` and `kill` without talking to the anchor.

The record is a cache of the anchor's state; `effective_status` refreshes it
against the anchor process (runc refreshState), so a dead anchor reads as stopped.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from scrun_py.errors import ContainerNotFound, ScrunError
from scrun_py.procs import process_start_time
from scrun_py.spool import STATE_FILE, container_dir, write_atomic
from scrun_py.status import Status


@dataclass
class ContainerRecord:
    id: str
    bundle: str
    rootfs: str
    oci_version: str = "1.0.2"
    annotations: dict[str, str] = field(default_factory=dict)
    status: str = Status.CREATING.value
    anchor_pid: int = 0
    anchor_start: str = ""
    created: str = ""
    owner: str = ""
    pid_file: str = ""
    job_id: int = 0
    owns_job: bool = True
    step_id: int | None = None
    exit_code: int | None = None

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ContainerRecord:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("container record is not a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        record = cls(**{k: v for k, v in raw.items() if k in names})
        Status(record.status)  # an unknown status is a corrupt record (ValueError)
        return record


def save(root: Path, record: ContainerRecord) -> None:
    write_atomic(container_dir(root, record.id) / STATE_FILE, record.to_json())


def load(root: Path, container_id: str) -> ContainerRecord:
    path = container_dir(root, container_id) / STATE_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ContainerNotFound() from exc
    except NotADirectoryError as exc:
        raise ContainerNotFound() from exc
    except PermissionError as exc:
        raise ScrunError(f"permission denied reading container state: {path}") from exc
    try:
        return ContainerRecord.from_json(data)
    except (ValueError, TypeError) as exc:
        raise ScrunError(f"corrupt container state file: {path}") from exc


def anchor_alive(record: ContainerRecord) -> bool:
    if record.anchor_pid <= 0:
        return False
    started = process_start_time(record.anchor_pid)
    return bool(started) and (not record.anchor_start or started == record.anchor_start)


def effective_status(record: ContainerRecord) -> Status:
    status = Status(record.status)
    if status is not Status.STOPPED and not anchor_alive(record):
        return Status.STOPPED
    return status
