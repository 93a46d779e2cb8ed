"""The container record (`state.json`): written atomically by the anchor on every
transition, read by `state`, `delete` and `kill` without talking to the anchor.

The record is a cache of the anchor's state; `effective_status` refreshes it
against the anchor process (runc refreshState), so a dead anchor reads as stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from scrun_py.errors import ContainerNotFound, ScrunError
from scrun_py.procs import process_start_time
from scrun_py.spool import STATE_FILE, container_dir, write_atomic
from scrun_py.status import Status


class ContainerRecord:
    """One container's state.json; FIELDS, in their order there."""

    FIELDS = ("id", "bundle", "rootfs", "oci_version", "annotations", "status", "anchor_pid",
              "anchor_start", "created", "owner", "pid_file", "job_id", "owns_job", "step_id",
              "exit_code")

    def __init__(self, id: str, bundle: str, rootfs: str,
                 oci_version: str = "1.0.2", annotations: dict[str, str] | None = None,
                 status: str = Status.CREATING.value, anchor_pid: int = 0,
                 anchor_start: str = "", created: str = "", owner: str = "",
                 pid_file: str = "", job_id: int = 0, owns_job: bool = True,
                 step_id: int | None = None, exit_code: int | None = None) -> None:
        self.id = id
        self.bundle = bundle
        self.rootfs = rootfs
        self.oci_version = oci_version
        self.annotations = annotations if annotations is not None else {}
        self.status = status
        self.anchor_pid = anchor_pid
        self.anchor_start = anchor_start
        self.created = created
        self.owner = owner
        self.pid_file = pid_file
        self.job_id = job_id
        self.owns_job = owns_job
        self.step_id = step_id
        self.exit_code = exit_code

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ContainerRecord) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return "ContainerRecord(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def to_json(self) -> bytes:
        return json.dumps(self.as_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ContainerRecord:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("container record is not a JSON object")
        record = cls(**{k: v for k, v in raw.items() if k in cls.FIELDS})
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
