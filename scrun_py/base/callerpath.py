"""The files a caller names (--log, --pid-file, --console-socket, --process, a bundle's
config.json, the audit file, scrun-py.toml), opened so that another local user cannot
turn them against the caller.  The one home of these rules:

- a symbolic link as the last component is followed only when the caller owns it or the
  owner of the directory it is in does (the rule `fs.protected_symlinks` applies in
  sticky world-writable directories, applied here in every directory, whatever the
  sysctl says): a link another user planted in /tmp or a shared directory is refused,
  an engine's own links keep working;
- a file is opened with O_NONBLOCK and O_NOFOLLOW, then checked with fstat: a FIFO,
  socket, device or directory where a file is expected is refused at once (only the
  null device passes), so that nothing a caller names can block a verb;
- a file the caller would create (a log) that another user made first is refused, unless
  that user owns the directory (or is root): what is appended to it would be theirs to
  read;
- a file is removed with `unlinkat` on its directory's descriptor, after an `fstatat`
  that it is a regular file of the caller's (and, when asked, after reading that it
  holds what the caller wrote).

A refusal is a `Refused` (an OSError) whose strerror says why, so the
callers' usual `{exc.strerror}` messages stay one line.  Intermediate components are
resolved by the kernel as for any path.  Imports os alone: `state` goes through here.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

#: the most symbolic links followed for one path (the kernel's own limit)
MAX_LINKS = 40
#: the null device's numbers (1, 3): the one device a caller may name as a file
_NULL_RDEV = os.makedev(1, 3)
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class Refused(OSError):
    """A path the rules above refuse; strerror says why, ending in 'refusing it'.  (An
    OSError of its own class: OSError(EPERM, …) would be a PermissionError, which the
    callers read as 'not readable'.)  `size`: the size of a file refused as too large
    (None when it grew past the limit while it was read)."""

    size: int | None = None


def _refused(path: str, why: str, code: str = "EPERM") -> Refused:
    import errno

    return Refused(getattr(errno, code), f"{why}: refusing it", path)


def kind(mode: int) -> str:
    """What a file of `mode` is, in words ('a FIFO', 'a directory', …)."""
    import stat

    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return word
    return "a regular file"


def _file_like(st: os.stat_result) -> bool:
    import stat

    return stat.S_ISREG(st.st_mode) or (stat.S_ISCHR(st.st_mode) and st.st_rdev == _NULL_RDEV)


def _check_link(dfd: int, name: str, st: os.stat_result, shown: str) -> str:
    """The target of the symbolic link `name` (`st`, not followed) in `dfd`, if it may
    be followed: its owner is the caller or the directory's owner.  The link is stat'ed
    again after readlink: a link swapped meanwhile is another inode, and is refused."""
    euid = os.geteuid()
    owner = os.fstat(dfd).st_uid
    if st.st_uid not in (euid, owner):
        raise _refused(shown, f"a symbolic link of uid {st.st_uid}, who owns neither it "
                              f"nor its directory for uid {euid}")
    target = os.readlink(name, dir_fd=dfd)
    again = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    if (again.st_ino, again.st_dev, again.st_uid) != (st.st_ino, st.st_dev, st.st_uid):
        raise _refused(shown, "a symbolic link that changed while it was read")
    return target


def _check_planted(dfd: int, st: os.stat_result, shown: str) -> None:
    """A file the caller would create (a log) that is already there must be the
    caller's, root's or its directory owner's: another user who made it first, world
    writable, in /tmp, would read every record appended to it (the rule
    `fs.protected_regular` applies in sticky directories, applied everywhere)."""
    import stat

    euid = os.geteuid()
    if (stat.S_ISREG(st.st_mode) and euid != 0
            and st.st_uid not in (euid, 0, os.fstat(dfd).st_uid)):
        raise _refused(shown, f"a file of uid {st.st_uid}, who owns neither it nor its "
                              f"directory for uid {euid}")


def resolve_last(path: str, *, links: bool = True) -> tuple[int, str, os.stat_result | None]:
    """The directory that holds `path`'s file once its symbolic links that may be
    followed are (an O_PATH descriptor, the caller closes it), the file's name there and
    its lstat (None when it does not exist).  OSError refusing another user's link, or
    any link when not `links`."""
    shown = path
    if not path:
        raise FileNotFoundError(2, "No such file or directory", path)
    for _ in range(MAX_LINKS):
        head, name = os.path.split(path)
        if not name or name in (".", ".."):
            raise IsADirectoryError(21, "Is a directory", shown)
        dfd = os.open(head or ".", _DIR_FLAGS)
        try:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                return dfd, name, None
            import stat

            if not stat.S_ISLNK(st.st_mode):
                return dfd, name, st
            if not links:
                raise _refused(shown, "a symbolic link", "ELOOP")
            target = _check_link(dfd, name, st, shown)
        except BaseException:
            os.close(dfd)
            raise
        os.close(dfd)
        path = target if os.path.isabs(target) else os.path.join(head or ".", target)
    raise _refused(shown, f"more than {MAX_LINKS} symbolic links", "ELOOP")


def open_file(path: str, flags: int, mode: int = 0o644, *, links: bool = True) -> int:
    """A descriptor (blocking, close-on-exec) of the regular file `path`, opened with
    `flags` (O_CREAT creates it `mode`), under the rules above (no symbolic link at all
    as its last component when not `links`).  OSError otherwise."""
    dfd, name, st = resolve_last(path, links=links)
    try:
        if st is not None and not _file_like(st):
            raise _refused(path, f"{kind(st.st_mode)}, not a regular file")
        if st is not None and flags & os.O_CREAT:
            _check_planted(dfd, st, path)
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode,
                     dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not _file_like(st):  # replaced between the look and the open
            raise _refused(path, f"{kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append(path: str, data: bytes, mode: int = 0o644) -> None:
    """Append `data` with one write (O_APPEND: whole records from concurrent writers),
    creating the file `mode` when it is missing."""
    fd = open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file `path`, at most `limit`; OSError for more (at most
    `limit` and one byte are read, so a file that grows meanwhile is refused too)."""
    fd = open_file(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            too_large = _refused(path, f"{what} of {size} bytes, more than the {limit} "
                                       "scrun-py reads", "EFBIG")
            too_large.size = size
            raise too_large
        data = read_capped(fd, limit, size)
    finally:
        os.close(fd)
    if data is None:
        raise _refused(path, f"{what} of more than the {limit} bytes scrun-py reads", "EFBIG")
    return data


def read_capped(fd: int, limit: int, size: int) -> bytes | None:
    """What `fd` holds, read to its end; None when that is more than `limit` bytes (at
    most `limit` and one are read: a file that grows while it is read is refused too).
    `size` (fstat's) sizes the reads.  The one capped read of scrun-py."""
    chunks = []
    left = limit + 1
    while left > 0 and (chunk := os.read(fd, min(left, max(size + 1, 1 << 16)))):
        chunks.append(chunk)
        left -= len(chunk)
    return None if left <= 0 else b"".join(chunks)


def _entry(path: str) -> tuple[int, str, os.stat_result | None]:
    """`path`'s directory (an O_PATH descriptor, the caller closes it), its last
    component and that entry's lstat (None when there is none)."""
    head, name = os.path.split(path)
    dfd = os.open(head or ".", _DIR_FLAGS)
    try:
        return dfd, name, os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return dfd, name, None
    except BaseException:
        os.close(dfd)
        raise


def check_writable(path: str) -> None:
    """Refuse (OSError) a `path` that a write by rename would replace but that is no
    regular file or symbolic link (a FIFO, socket, device or directory planted there),
    or that the kernel will not let the caller replace: in a sticky directory (/tmp),
    another user's entry, unless the caller or that user owns the directory (refused now,
    with its owner named, rather than once the job is granted).  Anything else is
    replaced by the rename, never followed or opened."""
    import stat

    dfd, _name, st = _entry(path)
    try:
        if st is None:
            return
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise _refused(path, f"{kind(st.st_mode)}, not a regular file")
        euid = os.geteuid()
        directory = os.fstat(dfd)
        if (directory.st_mode & stat.S_ISVTX and euid != 0
                and st.st_uid not in (euid, directory.st_uid)):
            raise _refused(path, f"{kind(st.st_mode)} of uid {st.st_uid} in a sticky "
                                 f"directory, which uid {euid} may not replace")
    finally:
        os.close(dfd)


def remove(path: str, expect: bytes | None = None) -> bool:
    """Remove `path` when it is a regular file of the caller's (not followed), holding
    `expect` when that is given; never opens anything else, never blocks.  Whether it
    was removed; OSError only for a directory that cannot be opened."""
    import stat

    dfd, name, st = _entry(path)
    try:
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        if expect is not None:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dfd)
            try:
                now = os.fstat(fd)
                if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
                    return False
                if os.read(fd, len(expect) + 2).strip() != expect:
                    return False
            finally:
                os.close(fd)
        os.unlink(name, dir_fd=dfd)
        return True
    finally:
        os.close(dfd)


def remove_pid_file(path: str, pid: int) -> None:
    """Remove a pid file only while it is the caller's regular file naming `pid` (as
    written: no newline): never someone else's, never through a symlink, never opening a
    FIFO or a device planted in its place; quietly, whatever is there."""
    try:
        remove(path, str(pid).encode())
    except OSError:
        pass


def peer_may_receive(peer_uid: int) -> bool:
    """Whether a process of `peer_uid` at the other end of a socket the caller named may
    be handed what the caller owns (the container's terminal): the caller or root."""
    return peer_uid in (os.geteuid(), 0)


def peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected unix socket (SO_PEERCRED's
    struct ucred: pid, uid, gid as C ints), as this process's user namespace sees it."""
    import _socket
    import sys

    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder, signed=True)
