"""One container as the short-lived verbs see it: its directory under --root, its
record (`state.json`), the liveness of its anchor and one request on its control socket.

`state`, `start`, `kill` and `delete` go through this handle in every case, and so do
container/store.py and container/spool.py for what they share with it.  `state` is
polled and engines call `start` and `delete` once per container: the interpreter's start
is most of their cost, so this module imports os, the C JSON scanner (fastjson) and, for
a request, socket; paths are strings.  The record's fields and their defaults and the
verbs' timeouts have their one home here (the names of the files, in base/layout.py).
"""

from __future__ import annotations

import os

from scrun_py.base import layout
from scrun_py.base.layout import CREATING, SITE_FILE, SOCKET_NAME, STATE_FILE, STATUSES, STOPPED
from scrun_py.base.procs import process_start_time
from scrun_py.container import fastjson

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar

#: how long `start` waits for the anchor to launch the step (image staging included),
#: `kill` for it to deliver the signal, and every verb to connect
START_TIMEOUT_S = 600.0
KILL_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 5.0
MAX_ID_LEN = 1024
# the ids runc accepts, ^[\w+-\.]+$ in ASCII; "." and ".." are path components, not ids.
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")
NOT_OWNER = "permission denied: container belongs to another user"


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
              "exit_code")
    TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "id": (str,), "bundle": (str,), "rootfs": (str,), "oci_version": (str,),
        "annotations": (dict,), "status": (str,), "anchor_pid": (int,), "anchor_start": (str,),
        "created": (str,), "owner": (str,), "pid_file": (str,), "job_id": (int,),
        "owns_job": (bool,), "step_id": (int, type(None)), "exit_code": (int, type(None))}

    def __init__(self, id: str, bundle: str, rootfs: str,
                 oci_version: str = "1.0.2", annotations: dict[str, str] | None = None,
                 status: str = CREATING, anchor_pid: int = 0,
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


def state_document(*, oci_version: str, container_id: str, status: str, pid: int,
                   bundle: str, rootfs: str, created: str, owner: str,
                   annotations: dict[str, str]) -> dict[str, Any]:
    """The OCI state document `state` prints: keys in Slurm's order, then runc's
    extras; pid is 0 once stopped."""
    return {
        "ociVersion": oci_version,
        "id": container_id,
        "status": str(status),
        "pid": 0 if status == STOPPED else pid,
        "bundle": bundle,
        "annotations": annotations,
        "rootfs": rootfs,
        "created": created,
        "owner": owner,
    }


def render(doc: dict[str, Any]) -> str:
    """One line of compact JSON (Slurm 25.05+ prints compact JSON)."""
    return fastjson.dumps(doc)


def site_file_may_apply(slurm_conf: str) -> bool:
    """Whether a site file sits next to `slurm_conf` or the system's slurm.conf (the
    system's may make itself the one in use): only then can it ask for an audit trail."""
    return any(os.path.lexists(os.path.join(os.path.dirname(conf), SITE_FILE))
               for conf in (slurm_conf, layout.DEFAULT_SLURM_CONF))


def check_private(path: str, what: str) -> None:
    """`path` (symlinks followed) must belong to the caller (its effective
    uid) and be writable by nobody else; ScrunError naming the owner or the mode."""
    from scrun_py.base.errors import ScrunError

    try:
        st = os.stat(path)
    except OSError as exc:
        raise ScrunError(f"{what} {path}: {exc.strerror}") from exc
    euid = os.geteuid()
    if st.st_uid != euid:
        raise ScrunError(f"{what} {path} belongs to uid {st.st_uid}, not to uid {euid}: "
                         "refusing it (another user may have created it)")
    if st.st_mode & 0o022:
        raise ScrunError(f"{what} {path} is writable by other users "
                         f"(mode {st.st_mode & 0o7777:04o}): refusing it")


def remove_pid_file(path: str, pid: int) -> None:
    """Remove the pid file only if it still names `pid` (never someone else's)."""
    try:
        with open(path, "rb") as fh:
            if fh.read().strip() == str(pid).encode():
                os.unlink(path)
    except OSError:
        pass


def remove_tree(path: str) -> None:
    """Remove a container dir and what we put in it; tolerate it being gone.  A stopped
    container's directory holds plain files: shutil only for anything else."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        try:
            os.unlink(os.path.join(path, name))
        except IsADirectoryError:
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            return
        except OSError:
            pass
    try:
        os.rmdir(path)
    except OSError:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


class Container:
    """The container `container_id` under the --root directory `root` (absolute)."""

    def __init__(self, root: str, container_id: str) -> None:
        self.id = validate_id(container_id)
        self.dir = os.path.join(root, container_id)
        self.state_file = os.path.join(self.dir, STATE_FILE)

    def record(self) -> ContainerRecord:
        """The record; ContainerNotFound, or ScrunError for one that cannot be read.
        (The errors module is imported only on the way to an error: `state` of a good
        record does without it.)"""
        try:
            with open(self.state_file, "rb") as fh:
                data = fh.read()
        except (FileNotFoundError, NotADirectoryError) as exc:
            from scrun_py.base.errors import ContainerNotFound

            raise ContainerNotFound() from exc
        except PermissionError as exc:
            from scrun_py.base.errors import ScrunError

            raise ScrunError(
                f"permission denied reading container state: {self.state_file}") from exc
        try:
            return ContainerRecord.from_json(data)
        except (ValueError, TypeError, RecursionError) as exc:
            from scrun_py.base.errors import ScrunError

            raise ScrunError(f"corrupt container state file: {self.state_file}") from exc

    @staticmethod
    def anchor_alive(record: ContainerRecord) -> bool:
        """The anchor the record names runs (not a later process with its pid)."""
        if record.anchor_pid <= 0:
            return False
        started = process_start_time(record.anchor_pid)
        return bool(started) and (not record.anchor_start or started == record.anchor_start)

    @classmethod
    def status(cls, record: ContainerRecord) -> str:
        """The record's status, refreshed against its anchor: a dead anchor's container
        has stopped, whatever the record says (runc's refreshState)."""
        if record.status != STOPPED and not cls.anchor_alive(record):
            return STOPPED
        return record.status

    def state_line(self) -> str:
        """The OCI state document `state` prints, as one line of compact JSON."""
        record = self.record()
        return render(state_document(
            oci_version=record.oci_version, container_id=record.id,
            status=self.status(record), pid=record.anchor_pid, bundle=record.bundle,
            rootfs=record.rootfs, created=record.created, owner=record.owner,
            annotations=record.annotations))

    def request(self, kind: str, timeout_s: float | None, **fields: Any) -> dict[str, Any]:
        """Send one control request to the anchor; its reply, or the error it raised.
        AnchorUnreachable when nothing answers; PermissionDenied for another user's."""
        from scrun_py.base.errors import AnchorUnreachable
        from scrun_py.container import protocol

        sock = self.connect()
        try:
            sock.settimeout(timeout_s)
            sock.sendall(protocol.encode_request(kind, **fields))
            data = protocol.read_line(sock)
        except TimeoutError as exc:
            raise AnchorUnreachable("timed out waiting for the container anchor") from exc
        except OSError as exc:
            raise AnchorUnreachable("lost connection to the container anchor") from exc
        finally:
            sock.close()
        if not data:
            raise AnchorUnreachable("container anchor closed the connection")
        return protocol.reply_or_raise(protocol.decode(data))

    def connect(self) -> Any:
        """The connected control socket, through /proc/self/fd/<dirfd>/ so that a
        --root of any length fits in sun_path."""
        # the C module: socket.py's wrapper imports selectors and enum (5 ms of a `start`
        # of 20); a request needs none of its additions
        import _socket
        import errno

        from scrun_py.base.errors import AnchorUnreachable, PermissionDenied

        try:
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
                sock.settimeout(CONNECT_TIMEOUT_S)
                try:
                    sock.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
                except OSError:
                    sock.close()
                    raise
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise PermissionDenied(NOT_OWNER) from exc
            raise AnchorUnreachable("container anchor is not running") from exc
        return sock
