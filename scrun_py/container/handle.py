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
    OPTIONAL = frozenset(FIELDS[3:])  # those a caller may leave out (their defaults: __init__)
    TYPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "id": (str,), "bundle": (str,), "rootfs": (str,), "oci_version": (str,),
        "annotations": (dict,), "status": (str,), "anchor_pid": (int,), "anchor_start": (str,),
        "created": (str,), "owner": (str,), "pid_file": (str,), "job_id": (int,),
        "owns_job": (bool,), "step_id": (int, type(None)), "exit_code": (int, type(None))}

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
    pid (the anchor's) is 0 once stopped."""
    return {
        "ociVersion": record.oci_version,
        "id": record.id,
        "status": str(status),
        "pid": 0 if status == STOPPED else record.anchor_pid,
        "bundle": record.bundle,
        "annotations": record.annotations,
        "rootfs": record.rootfs,
        "created": record.created,
        "owner": record.owner,
    }


def render(doc: dict[str, Any]) -> str:
    """One line of compact JSON (Slurm 25.05+ prints compact JSON)."""
    return fastjson.dumps(doc)


def site_file_may_apply(slurm_conf: str) -> bool:
    """Whether a site file sits next to `slurm_conf` or the system's slurm.conf (the
    system's may make itself the one in use): only then can it ask for an audit trail."""
    return any(os.path.lexists(os.path.join(os.path.dirname(conf), SITE_FILE))
               for conf in (slurm_conf, layout.DEFAULT_SLURM_CONF))


#: the largest state.json a verb reads: a record carries config.json's annotations, and
#: create reads at most oci/bundle.py's cap of config.json; anything larger is not ours
MAX_RECORD_BYTES = 32 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _error(cls_name: str, msg: str) -> Exception:
    """The errors module's `cls_name` (imported only on the way to an error)."""
    from scrun_py.base import errors

    cls: type[Exception] = getattr(errors, cls_name)
    return cls(msg) if msg else cls()


def check_stat(st: os.stat_result, path: str, what: str) -> None:
    """`st` (of `path`, not followed) must be the caller's (effective uid) and writable by
    nobody else; ScrunError naming the owner or the mode, and what to do."""
    euid = os.geteuid()
    if st.st_uid != euid:
        raise _error("ScrunError", f"{what} {path} belongs to uid {st.st_uid}, not to uid "
                     f"{euid}: refusing it (another user may have created it; remove it or "
                     "choose another --root)")
    if st.st_mode & 0o022:
        raise _error("ScrunError", f"{what} {path} is writable by other users (mode "
                     f"{st.st_mode & 0o7777:04o}): refusing it (chmod go-w it)")


def check_private(path: str, what: str) -> None:
    """`path` itself (a symlink is not followed, and refused) must belong to the caller
    and be writable by nobody else; ScrunError naming the owner or the mode."""
    import stat

    try:
        st = os.lstat(path)
    except OSError as exc:
        raise _error("ScrunError", f"{what} {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode):
        raise _error("ScrunError", f"{what} {path} is a symbolic link: refusing it "
                     "(remove it or choose another --root)")
    check_stat(st, path, what)


def open_root(root: str, *, create: bool = False) -> int | None:
    """The --root directory `root`, opened without following a symlink (O_NOFOLLOW) and
    checked with fstat: the caller's, not writable by group or others.  Every verb goes
    into the root through this descriptor.  In a shared place (the /tmp fallback of
    invocation.default_root) another user may have made the root, or a symlink in its
    place, first.  None when it does not exist, unless `create` (then made 0700)."""
    if create:
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise _error("ScrunError",
                         f"cannot create root directory {root}: {exc.strerror}") from exc
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        if create:
            raise _error("ScrunError", f"root directory {root} vanished") from None
        return None
    except OSError as exc:
        what = _not_a_directory(root, None, exc)
        if what == "a symbolic link":
            raise _error("ScrunError", f"root directory {root} is a symbolic link: refusing "
                         "it (remove it or choose another --root)") from None
        if what == "not a directory":
            raise _error("ScrunError", f"root {root} is not a directory") from None
        if isinstance(exc, PermissionError):  # another user's 0700 root
            raise _error("PermissionDenied", f"permission denied: root directory {root} "
                         "is not the caller's (use --root or XDG_RUNTIME_DIR to choose "
                         "another)") from None
        raise _error("ScrunError", f"root directory {root}: {what}") from None
    try:
        check_stat(os.fstat(fd), root, "root directory")
        if create and not os.access(f"/proc/self/fd/{fd}", os.W_OK | os.X_OK):
            raise _error("ScrunError", f"root directory {root} is not writable")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_a_directory(name: str, dir_fd: int | None, exc: OSError) -> str:
    """Why `name` could not be opened as a directory without following a symlink:
    'a symbolic link' (Linux says ENOTDIR or ELOOP for one under O_DIRECTORY|O_NOFOLLOW),
    'not a directory', or the error's words."""
    import errno
    import stat

    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
        return exc.strerror or str(exc)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return "not a directory"
    return "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"


def remove_pid_file(path: str, pid: int) -> None:
    """Remove the pid file only if it is still the caller's regular file naming `pid`:
    never someone else's, never through a symlink, never opening a FIFO or a device
    planted in its place (base/callerpath.remove)."""
    from scrun_py.base import callerpath

    try:
        callerpath.remove(path, str(pid).encode())
    except OSError:
        pass


def remove_at(parent_fd: int, name: str) -> None:
    """Remove the directory `name` of the directory `parent_fd` and what is in it, never
    following a symlink: a symlink in its place is removed itself, not what it points
    to; tolerate it being gone.  A container's directory holds plain files: shutil
    (whose rmtree with dir_fd does not follow symlinks either) only for anything else."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    except OSError:  # a symlink or a file: unlink removes the name, not its target
        try:
            os.unlink(name, dir_fd=parent_fd)
        except OSError:
            pass
        return
    try:
        for _ in range(3):  # the anchor may still add a file while it exits
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        os.unlink(entry.name, dir_fd=fd)
                    except IsADirectoryError:
                        import shutil

                        shutil.rmtree(entry.name, ignore_errors=True, dir_fd=fd)
                    except OSError:
                        pass
            try:
                os.rmdir(name, dir_fd=parent_fd)
                return
            except OSError:
                continue
    finally:
        os.close(fd)


def remove_tree(path: str) -> None:
    """Remove a container dir by path (the anchor's and create's own): its parent is
    followed as given, the directory itself never through a symlink (remove_at)."""
    head, name = os.path.split(os.path.normpath(path))
    try:
        parent = os.open(head or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        remove_at(parent, name)
    finally:
        os.close(parent)


def peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected unix socket (SO_PEERCRED's
    struct ucred: pid, uid, gid as C ints), as this process's user namespace sees it."""
    import _socket
    import sys

    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder, signed=True)


class Container:
    """The container `container_id` under the --root directory `root` (absolute).

    Nothing is taken from the root on trust: the root and the container's directory are
    opened without following a symlink and must be the caller's and private (open_root,
    dir_fd), state.json is read through that descriptor with O_NOFOLLOW and must be a
    regular file of the caller's, and the control socket's peer must be the caller's uid
    (connect).  Another local user can make the default root in /tmp first, or plant a
    record and a socket of their own: every verb then refuses with one line."""

    def __init__(self, root: str, container_id: str) -> None:
        self._fd = -1  # the container's directory, once dir_fd has opened and checked it
        self.id = validate_id(container_id)
        self.root = root
        self.dir = os.path.join(root, container_id)
        self.state_file = os.path.join(self.dir, STATE_FILE)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def dir_fd(self) -> int:
        """The container's directory, opened through the checked root without following
        a symlink, and checked itself; ContainerNotFound when either is missing,
        PermissionDenied for another user's, ScrunError for a symlink or a file."""
        if self._fd >= 0:
            return self._fd
        root_fd = open_root(self.root)
        if root_fd is None:
            raise _error("ContainerNotFound", "")
        try:
            try:
                fd = os.open(self.id, _DIR_FLAGS, dir_fd=root_fd)
            except FileNotFoundError:
                raise _error("ContainerNotFound", "") from None
            except OSError as exc:
                what = _not_a_directory(self.id, root_fd, exc)
                raise _error("ScrunError",
                             f"container directory {self.dir} is {what}: refusing it") from None
        finally:
            os.close(root_fd)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise _error("PermissionDenied", NOT_OWNER)
            if st.st_mode & 0o022:
                raise _error("PermissionDenied",
                             f"permission denied: container directory {self.dir} is writable "
                             f"by other users (mode {st.st_mode & 0o7777:04o})")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return fd

    def exists(self) -> bool:
        """Whether the container's directory is there (and the caller's: dir_fd)."""
        from scrun_py.base.errors import ContainerNotFound

        try:
            self.dir_fd()
        except ContainerNotFound:
            return False
        return True

    def has_socket(self) -> bool:
        """Whether the anchor's socket is in the container's directory."""
        try:
            os.stat(SOCKET_NAME, dir_fd=self.dir_fd(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def foreign_content(self) -> str:
        """What makes the directory other than one scrun-py made ('' when nothing does):
        a mode other than create's 0700, or a name scrun-py never writes there (its
        record, socket and abandon script, and write_atomic's `.NAME.PID.tmp`).  A
        directory without a record is removed only when this is ''; `--root ~` and
        `delete .ssh` must not empty the caller's ~/.ssh."""
        fd = self.dir_fd()
        mode = os.fstat(fd).st_mode & 0o7777
        if mode != 0o700:
            return f"mode {mode:04o}"
        ours = (STATE_FILE, SOCKET_NAME, layout.ABANDON_FILE)
        with os.scandir(fd) as entries:
            for entry in entries:
                name = entry.name
                if name in ours:
                    continue
                if name.startswith(".") and name.endswith(".tmp") and any(
                        name.startswith(f".{n}.") for n in ours):
                    continue
                return repr(name)
        return ""

    def remove(self) -> None:
        """Remove the container's directory through the checked root, never following a
        symlink (remove_at)."""
        self.close()
        root_fd = open_root(self.root)
        if root_fd is None:
            return
        try:
            remove_at(root_fd, self.id)
        finally:
            os.close(root_fd)

    def record(self) -> ContainerRecord:
        """The record; ContainerNotFound, or ScrunError for one that cannot be read or is
        not the caller's.  (The errors module is imported only on the way to an error:
        `state` of a good record does without it.)"""
        try:
            fd = os.open(STATE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.dir_fd())
        except FileNotFoundError:
            raise _error("ContainerNotFound", "") from None
        except PermissionError:
            raise _error("ScrunError", "permission denied reading container state: "
                         f"{self.state_file}") from None
        except OSError as exc:
            raise _error("ScrunError", f"container state file {self.state_file}: "
                         f"{exc.strerror}: refusing it") from None
        try:
            data = self._read_record(fd)
        finally:
            os.close(fd)
        try:
            return ContainerRecord.from_json(data)
        except (ValueError, TypeError, RecursionError) as exc:
            raise _error("ScrunError",
                         f"corrupt container state file: {self.state_file}") from exc

    def _read_record(self, fd: int) -> bytes:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _error("ScrunError", f"container state file {self.state_file} is not a "
                         "regular file: refusing it")
        if st.st_uid != os.geteuid():
            raise _error("PermissionDenied", NOT_OWNER)
        if st.st_mode & 0o022:
            raise _error("PermissionDenied", f"permission denied: container state file "
                         f"{self.state_file} is writable by other users "
                         f"(mode {st.st_mode & 0o7777:04o})")
        if st.st_size > MAX_RECORD_BYTES:
            raise _error("ScrunError", f"container state file {self.state_file} is "
                         f"{st.st_size} bytes, more than the {MAX_RECORD_BYTES} "
                         "scrun-py reads: refusing it")
        chunks = []
        left = MAX_RECORD_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise _error("ScrunError", f"container state file {self.state_file} is more "
                         f"than the {MAX_RECORD_BYTES} bytes scrun-py reads: refusing it")
        return b"".join(chunks)

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
        return render(state_document(record, self.status(record)))

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
        --root of any length fits in sun_path.  The socket must be a socket of the
        caller's in the checked directory, and the process that listens on it must run
        as the caller (SO_PEERCRED): otherwise PermissionDenied, and nothing is sent."""
        import errno
        import stat

        from scrun_py.base.errors import AnchorUnreachable, PermissionDenied

        fd = self.dir_fd()
        try:
            st = os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            raise AnchorUnreachable("container anchor is not running") from exc
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionDenied(NOT_OWNER)
        try:
            sock = _connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise PermissionDenied(NOT_OWNER) from exc
            raise AnchorUnreachable("container anchor is not running") from exc
        try:
            peer = peer_uid(sock)
        except OSError:
            peer = -1
        if peer != os.geteuid():
            sock.close()
            raise PermissionDenied(NOT_OWNER)
        return sock


def _connect(address: str) -> Any:
    """A unix stream socket connected to `address`.  A listener whose queue is full (a
    flood of connections from the caller's own processes) answers EAGAIN at once: the
    connection is tried again for up to CONNECT_TIMEOUT_S, as the anchor makes room.
    The C module: socket.py's wrapper imports selectors and enum (5 ms of a `start` of
    20); a request needs none of its additions."""
    import _socket
    import errno
    import time

    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EAGAIN or time.monotonic() >= deadline:
                raise
        time.sleep(0.02)
