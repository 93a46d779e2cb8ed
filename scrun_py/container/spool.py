"""On-disk layout under --root: one 0700 directory per container.

`<root>/<id>/state.json` (the record), `<root>/<id>/anchor.sock` (control
socket).  Socket addresses go through `/proc/self/fd/<dirfd>/` so a
200-character --root still fits in sun_path (the trick conmon uses).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from scrun_py.base.errors import ScrunError
from scrun_py.base.layout import SOCKET_NAME, STATE_FILE
from scrun_py.container import rootdir
from scrun_py.container.record import validate_id

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:  # create imports this module: re is the anchor's
    import _socket

    from scrun_py.container.record import ContainerRecord

    # paths in, strings out: the anchor does not import pathlib (with urllib.parse and
    # ipaddress; its cost: base/lean.py)
    PathArg = str | os.PathLike[str]

def matching_ids(root: PathArg, pattern: str) -> list[str]:
    """Ids of the containers under `root` that the regular expression `pattern` matches
    anywhere (crun's `--regex`, which uses POSIX regexec), sorted.  The root is opened
    as every verb opens it (rootdir.open_root); only directories count, never a symlink."""
    import re

    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ScrunError(f"invalid regular expression {pattern!r}: {exc.msg}") from None
    fd = rootdir.open_root(os.fspath(root))
    if fd is None:
        return []
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError as exc:
        raise ScrunError(f"cannot list {root}: {exc.strerror}") from None
    finally:
        os.close(fd)
    return sorted(n for n in names if _is_id(n) and regex.search(n))


def _is_id(name: str) -> bool:
    try:
        validate_id(name)
    except ScrunError:
        return False
    return True


def container_dir(root: PathArg, container_id: str) -> str:
    return os.path.join(os.fspath(root), validate_id(container_id))


def ensure_root(root: PathArg) -> None:
    """Create --root (0700) if needed; it must be a writable directory of the caller's,
    not a symlink, that no other user can write (rootdir.open_root; runc checks
    XDG_RUNTIME_DIR the same way)."""
    fd = rootdir.open_root(os.fspath(root), create=True)
    if fd is not None:
        os.close(fd)


def make_container_dir(root: PathArg, container_id: str) -> str:
    """Create the container's spool dir (0700) atomically in the checked root; an
    existing one means a duplicate id."""
    from scrun_py.base.errors import ContainerExists

    path = container_dir(root, container_id)
    fd = rootdir.open_root(os.fspath(root))
    if fd is None:
        raise ScrunError(f"cannot create {path}: root directory {root} does not exist")
    try:
        os.mkdir(container_id, mode=0o700, dir_fd=fd)
    except FileExistsError as exc:
        raise ContainerExists() from exc
    except OSError as exc:
        raise ScrunError(f"cannot create {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return path


def write_atomic(path: PathArg, data: bytes, mode: int = 0o600, *, lock: bool = False,
                 owner: tuple[int, int] | None = None) -> None:
    """Write a file by rename so readers never see a partial file: state.json, pid
    files, the abandon script and a rewritten config.json all go through here
    (oci/taskenv.py, which runs on nodes with the standard library alone, has its own).

    The temporary name is created with O_EXCL|O_NOFOLLOW, and rename replaces
    a symlink planted at `path` instead of following it (runc's pid file).  With
    `lock`, an fcntl write lock is held on the new file from before its content is
    written until it has replaced `path`.  `owner` (uid, gid) is given to the new file
    before its content is written.  On any failure the temporary file is removed.
    """
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        if lock:
            import fcntl

            fcntl.lockf(fd, fcntl.LOCK_EX)
        view = memoryview(data)
        while view:  # os.write may write less than asked (a large config.json)
            view = view[os.write(fd, view):]
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def write_pid_file(path: PathArg, pid: int) -> None:
    """Bare decimal pid, no newline (go-runc uses strict Atoi), written atomically and
    locked while written, as Slurm's scrun does: a reader that takes a read lock on the
    file waits until the write is complete."""
    from scrun_py.base import callerpath

    try:  # a FIFO, device or directory planted there is refused; a symlink is replaced
        callerpath.check_writable(os.fspath(path))
        write_atomic(path, str(pid).encode(), 0o644, lock=True)
    except OSError as exc:
        raise ScrunError(f"cannot write pid file {path}: {exc.strerror}") from exc


def save_record(root: PathArg, record: ContainerRecord) -> None:
    """Write the container's record (state.json) atomically: the anchor does on every
    transition."""
    write_atomic(os.path.join(container_dir(root, record.id), STATE_FILE), record.to_json())


@contextlib.contextmanager
def dir_fd(path: PathArg) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def short_address(fd: int, name: str = SOCKET_NAME) -> str:
    return f"/proc/self/fd/{fd}/{name}"


def bind(path: PathArg) -> _socket.socket:
    """Bind and listen on the anchor socket in directory `path` (0600).  The C module's
    socket: socket.py's wrapper adds nothing the anchor uses (anchor/server.py)."""
    import _socket

    with dir_fd(path) as fd:
        address = short_address(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            sock.bind(address)
        finally:
            os.umask(old)
        sock.listen(64)
        return sock
