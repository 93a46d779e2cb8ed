"""The Slurm release `srun --version` printed, remembered per srun binary.

The anchor needs the release of the client commands (srun's --container-id exists from
23.02) and asks `srun --version` while the job is allocated: a process of a few ms of
CPU per container that competes with salloc on a busy login node.  The answer depends
only on the srun binary (and the libslurm installed with it), so it is kept in one small
file in the caller's --root directory, keyed by srun's real path and its inode, size,
mtime and ctime: an upgrade or a rebuild replaces the binary and misses the memo, and
the next container asks srun again.

The --root directory is the caller's own (container/rootdir.py checks owner and mode
before any verb uses it), so nobody else can plant an answer there.  The file's name
holds a character no container id may have: `list`, which lists directories only, and
`create` never meet it.  A memo that cannot be read or written is no memo: the anchor
asks srun as before.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py

#: the memo's name in the --root directory ('@' is not allowed in a container id)
MEMO_NAME = "@srun-release"
#: the memo is one short line; anything longer is not ours
_MAX_BYTES = 4096


def memo_path(root: str) -> str:
    return os.path.join(root, MEMO_NAME)


def binary_key(srun: str) -> str | None:
    """What identifies the srun binary `srun` (an absolute path): its real path, device,
    inode, size, mtime and ctime; None when it cannot be stat'ed."""
    try:
        real = os.path.realpath(srun)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    return (f"{real}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}"
            f"\0{st.st_ctime_ns}")


def recall(path: str, key: str) -> tuple[int, int] | None:
    """The release remembered at `path` for the binary `key`; None when there is none,
    it is for another binary, or the file is not a plain file of ours."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        data = os.read(fd, _MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        return None
    stored, sep, release = data.decode(errors="replace").rstrip("\n").rpartition("\t")
    if not sep or stored != key:
        return None
    major, dot, minor = release.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def remember(path: str, key: str, release: tuple[int, int]) -> None:
    """Write the memo; nothing when it cannot.

    The file is written unnamed (O_TMPFILE in the memo's directory) and linked at `path`
    only once complete: no reader sees a partial memo, and a process killed at any point
    leaves no file behind (a temporary name would stay in the caller's --root).  A memo
    already there (for another binary) is unlinked first: a reader in between finds no
    memo and asks srun.  Where the filesystem has no O_TMPFILE there is no memo."""
    try:
        fd = os.open(os.path.dirname(path) or ".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC,
                     0o600)
    except (OSError, AttributeError):
        return
    try:
        os.write(fd, f"{key}\t{release[0]}.{release[1]}\n".encode(errors="replace"))
        _link_into_place(fd, path)
    except OSError:
        pass
    finally:
        os.close(fd)


def _link_into_place(fd: int, path: str) -> None:
    """Give the unnamed file `fd` the name `path`, replacing a file there.  The link is
    linkat(2) of /proc/self/fd/FD with AT_SYMLINK_FOLLOW (os.link makes that call only
    when given a directory descriptor; link(2) would link the symlink itself)."""
    proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            os.link(str(fd), path, src_dir_fd=proc, follow_symlinks=True)
        except FileExistsError:
            os.unlink(path)
            os.link(str(fd), path, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)
