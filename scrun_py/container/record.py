"""A container's record (`state.json`) and what is printed of it: the record's fields,
their types and defaults, the container ids runc accepts, and the OCI state document.
Pure: the record is read and written by container/rootdir.py and container/spool.py.
`state` imports this module, os and the C JSON scanner alone.
"""

from __future__ import annotations

from scrun_py.base.layout import CREATING, STATUSES, STOPPED
from scrun_py.container import fastjson

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypedDict, Unpack

    class RecordFields(TypedDict, total=False):
        """ContainerRecord's fields after id, bundle and rootfs, all optional (a record
        of records.py would import collections into `state`: this one is mypy's only)."""

        oci_version: str
        annotations: dict[str, str] | None
        status: str
        anchor_pid: int
        anchor_start: str
        created: str
        owner: str
        pid_file: str
        job_id: int
        owns_job: bool
        step_id: int | None
        exit_code: int | None
        pid: int

MAX_ID_LEN = 1024
# the ids runc accepts, ^[\w+-\.]+$ in ASCII; "." and ".." are path components, not ids.
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")


def validate_id(container_id: str) -> str:
    """`container_id`, or InvalidContainerId saying why it is not one."""
    reason = ""
    if not container_id:
        reason = "empty"
    # surrogateescape: undecodable argv bytes arrive as lone surrogates (PEP 383).
    elif (len(container_id) > MAX_ID_LEN
          or len(container_id.encode(errors="surrogateescape")) > 255):
        reason = "too long"
    elif container_id in (".", "..") or not set(container_id) <= ID_CHARS:
        reason = "only letters, digits, '_', '+', '-' and '.' are allowed"
    if reason:
        from scrun_py.base.errors import InvalidContainerId  # a good id imports no errors

        raise InvalidContainerId(reason)
    return container_id


class ContainerRecord:
    """One container's state.json; FIELDS, in their order there, of the types TYPES."""

    FIELDS = ("id", "bundle", "rootfs", "oci_version", "annotations", "status", "anchor_pid",
              "anchor_start", "created", "owner", "pid_file", "job_id", "owns_job", "step_id",
              "exit_code", "pid")
    OPTIONAL = frozenset(FIELDS[3:])  # those a caller may leave out (their defaults: __init__)
    TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "id": (str,), "bundle": (str,), "rootfs": (str,), "oci_version": (str,),
        "annotations": (dict,), "status": (str,), "anchor_pid": (int,), "anchor_start": (str,),
        "created": (str,), "owner": (str,), "pid_file": (str,), "job_id": (int,),
        "owns_job": (bool,), "step_id": (int, type(None)), "exit_code": (int, type(None)),
        "pid": (int,)}

    def __init__(self, id: str, bundle: str, rootfs: str,
                 **fields: Unpack[RecordFields]) -> None:
        """The fields after rootfs by name; each one left out has its default here."""
        unknown = fields.keys() - self.OPTIONAL
        if unknown:
            raise TypeError(f"ContainerRecord: unknown field {min(unknown)!r}")
        self.id = id
        self.bundle = bundle
        self.rootfs = rootfs
        self.oci_version = fields.get("oci_version", "1.0.2")
        annotations = fields.get("annotations")
        self.annotations = annotations if annotations is not None else {}
        self.status = fields.get("status", CREATING)
        self.anchor_pid = fields.get("anchor_pid", 0)
        self.anchor_start = fields.get("anchor_start", "")
        self.created = fields.get("created", "")
        self.owner = fields.get("owner", "")
        self.pid_file = fields.get("pid_file", "")
        self.job_id = fields.get("job_id", 0)
        self.owns_job = fields.get("owns_job", True)
        self.step_id = fields.get("step_id")
        self.exit_code = fields.get("exit_code")
        # the container's pid as reported (state, --pid-file, list): the namespace
        # holder's (anchor/nsholder.py); 0 when the anchor is the pid (no holder)
        self.pid = fields.get("pid", 0)

    @property
    def reported_pid(self) -> int:
        """The pid `state` reports while the container has not stopped."""
        return self.pid or self.anchor_pid

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ContainerRecord) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return "ContainerRecord(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def to_json(self) -> bytes:
        return fastjson.dumps(self.as_dict()).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ContainerRecord:
        """The record; ValueError for anything that is not one (a field of another type
        than TYPES says, an unknown status)."""
        raw = fastjson.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("container record is not a JSON object")
        fields = {k: v for k, v in raw.items() if k in cls.FIELDS}
        for key, value in fields.items():
            kinds = cls.TYPES[key]
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ValueError(f"container record field {key} is a {type(value).__name__}")
        record = cls(**fields)
        if record.status not in STATUSES:
            raise ValueError(f"container record status {record.status!r} is not one")
        return record


def state_document(record: ContainerRecord, status: str) -> dict[str, Any]:
    """The OCI state document `state` prints of `record`, whose status is `status` (the
    record's, refreshed: Container.status): keys in Slurm's order, then runc's extras;
    pid (the namespace holder's, else the anchor's) is 0 once stopped."""
    return {
        "ociVersion": record.oci_version,
        "id": record.id,
        "status": str(status),
        "pid": 0 if status == STOPPED else record.reported_pid,
        "bundle": record.bundle,
        "annotations": record.annotations,
        "rootfs": record.rootfs,
        "created": record.created,
        "owner": record.owner,
    }


def render(doc: dict[str, Any]) -> str:
    """One line of compact JSON (Slurm 25.05+ prints compact JSON)."""
    return fastjson.dumps(doc)
