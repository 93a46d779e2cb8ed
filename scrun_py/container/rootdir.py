"""The --root directory and what is in it, opened so that nothing another local user put
there is acted on: the one home of the owner/mode checks, of the capped read of a record
and of removal through directory descriptors.  Every verb enters the root through
`open_root`, a container's directory through `open_container`, its record through
`read_state`; nothing is followed through a symlink.  (The files a caller names outside
the root, --log or --pid-file, are base/callerpath.py's.)  Imports os alone: `state`
goes through here.
"""

from __future__ import annotations

import os

from scrun_py.base.layout import ABANDON_FILE, SOCKET_NAME, STAGE_OUT_FILE, STATE_FILE

NOT_OWNER = "permission denied: container belongs to another user"
#: the largest state.json a verb reads: a record carries config.json's annotations, and
#: create reads at most oci/bundle.py's cap of config.json; anything larger is not ours
MAX_RECORD_BYTES = 32 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _error(cls_name: str, msg: str) -> Exception:
    """The errors module's `cls_name` (imported only on the way to an error)."""
    from scrun_py.base import errors

    cls: type[Exception] = getattr(errors, cls_name)
    return cls(msg) if msg else cls()


def check_owned(st: os.stat_result, path: str, what: str, *, inside: bool = False) -> None:
    """`st` (of `path`, not followed) must be the caller's (effective uid) and writable by
    nobody else.  For the root itself, ScrunError naming the owner or the mode and what
    to do; for what is `inside` a root (a container's directory, its record),
    PermissionDenied (NOT_OWNER for another owner)."""
    euid = os.geteuid()
    mode = st.st_mode & 0o7777
    if inside:
        if st.st_uid != euid:
            raise _error("PermissionDenied", NOT_OWNER)
        if st.st_mode & 0o022:
            raise _error("PermissionDenied", f"permission denied: {what} {path} is writable "
                                             f"by other users (mode {mode:04o})")
        return
    if st.st_uid != euid:
        raise _error("ScrunError", f"{what} {path} belongs to uid {st.st_uid}, not to uid "
                     f"{euid}: refusing it (another user may have created it; remove it or "
                     "choose another --root)")
    if st.st_mode & 0o022:
        raise _error("ScrunError", f"{what} {path} is writable by other users (mode "
                     f"{mode:04o}): refusing it (chmod go-w it)")


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
    check_owned(st, path, what)


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
        what = not_a_directory(root, None, exc)
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
        check_owned(os.fstat(fd), root, "root directory")
        if create and not os.access(f"/proc/self/fd/{fd}", os.W_OK | os.X_OK):
            raise _error("ScrunError", f"root directory {root} is not writable")
    except BaseException:
        os.close(fd)
        raise
    return fd



def open_container(root: str, container_id: str) -> int:
    """The directory of `container_id` (a valid id) under `root`, opened through the
    checked root without following a symlink, and checked itself; ContainerNotFound when
    either is missing, PermissionDenied for another user's, ScrunError for a symlink or
    a file."""
    shown = os.path.join(root, container_id)
    root_fd = open_root(root)
    if root_fd is None:
        raise _error("ContainerNotFound", "")
    try:
        try:
            fd = os.open(container_id, _DIR_FLAGS, dir_fd=root_fd)
        except FileNotFoundError:
            raise _error("ContainerNotFound", "") from None
        except OSError as exc:
            what = not_a_directory(container_id, root_fd, exc)
            raise _error("ScrunError",
                         f"container directory {shown} is {what}: refusing it") from None
    finally:
        os.close(root_fd)
    try:
        check_owned(os.fstat(fd), shown, "container directory", inside=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_state(dir_fd: int, shown: str) -> bytes:
    """The bytes of the record in the checked container directory `dir_fd` (`shown` is
    its path, for messages): opened with O_NOFOLLOW and O_NONBLOCK, a regular file of
    the caller's that nobody else can write, at most MAX_RECORD_BYTES.
    ContainerNotFound without one; ScrunError or PermissionDenied otherwise."""
    import stat

    path = os.path.join(shown, STATE_FILE)
    try:
        fd = os.open(STATE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        raise _error("ContainerNotFound", "") from None
    except PermissionError:
        raise _error("ScrunError", f"permission denied reading container state: {path}"
                     ) from None
    except OSError as exc:
        raise _error("ScrunError", f"container state file {path}: {exc.strerror}: "
                     "refusing it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _error("ScrunError", f"container state file {path} is not a regular "
                         "file: refusing it")
        check_owned(st, path, "container state file", inside=True)
        if st.st_size > MAX_RECORD_BYTES:
            raise _error("ScrunError", f"container state file {path} is {st.st_size} "
                         f"bytes, more than the {MAX_RECORD_BYTES} scrun-py reads: "
                         "refusing it")
        from scrun_py.base.callerpath import read_capped

        data = read_capped(fd, MAX_RECORD_BYTES, st.st_size)
    finally:
        os.close(fd)
    if data is None:
        raise _error("ScrunError", f"container state file {path} is more than the "
                     f"{MAX_RECORD_BYTES} bytes scrun-py reads: refusing it")
    return data


def foreign_content(dir_fd: int) -> str:
    """What makes the checked container directory `dir_fd` other than one scrun-py made
    ('' when nothing does): a mode other than create's 0700, or a name scrun-py never
    writes there (its record, socket, abandon script and owed stage_out, and
    spool.write_atomic's `.NAME.PID.tmp`).  A directory without a record is removed only
    when this is ''; `--root ~` and `delete .ssh` must not empty the caller's ~/.ssh."""
    mode = os.fstat(dir_fd).st_mode & 0o7777
    if mode != 0o700:
        return f"mode {mode:04o}"
    ours = (STATE_FILE, SOCKET_NAME, ABANDON_FILE, STAGE_OUT_FILE)
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            name = entry.name
            if name in ours:
                continue
            if name.startswith(".") and name.endswith(".tmp") and any(
                    name.startswith(f".{n}.") for n in ours):
                continue
            return repr(name)
    return ""


def not_a_directory(name: str, dir_fd: int | None, exc: OSError) -> str:
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
