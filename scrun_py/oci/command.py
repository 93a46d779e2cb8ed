"""Whether the container's command can run: process.args[0] looked up inside the rootfs
as the runtime looks it up inside the container (runc 1.1's exec.LookPath), before a job
is asked for.  Pure path logic over the bundle's rootfs; no job, no Slurm.

runc and crun refuse such a command at `create`, and engines turn the runtime's message
into their exit code: podman (libpod `getOCIRuntimeError`, define `ExitCode`) gives 127
for a message with "executable file not found in" or "no such file or directory", 126
for "permission denied"; docker's CLI (`runStartContainerErr`) the same.  So the
messages are runc's: `exec: "NAME": stat NAME: no such file or directory`,
`exec: "NAME": executable file not found in $PATH`, `exec: "NAME": permission denied`.

Only a certain answer refuses: a path that a config.json mount covers (docker's and
podman's --init, a `-v` of the host's), or a lookup the login node cannot finish (a
directory it may not search, a loop of links), is left to the node's runtime.
"""

from __future__ import annotations

import errno
import os
import stat

from scrun_py.oci.bundle import DEFAULT_PATH

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Sequence

#: the symbolic links one lookup follows, as the kernel (MAXSYMLINKS)
MAX_LINKS = 40


class Unknown(Exception):
    """The login node cannot tell (a mount covers the path, a lookup it cannot finish)."""


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part and part != "."]


def _covered(parts: list[str], mounts: Sequence[str]) -> bool:
    """Whether the container path `parts` is a mount destination or lies under one."""
    for dest in mounts:
        dparts = _split(dest)
        if dparts and parts[:len(dparts)] == dparts:
            return True
    return False


def _mount_below(parts: list[str], mounts: Sequence[str]) -> bool:
    """Whether a mount destination lies under the container path `parts` (the runtime
    makes its mount point there, in a directory the rootfs may lack)."""
    return any(_split(dest)[:len(parts)] == parts for dest in mounts)


def resolve(rootfs: str, path: str, mounts: Sequence[str] = ()) -> os.stat_result | None:
    """The stat of container path `path` (absolute) in `rootfs`, its symbolic links
    followed inside the rootfs (an absolute target from the rootfs's top, `..` never
    above it); None when it does not exist; Unknown when a mount covers it or the
    lookup cannot be finished here."""
    todo = _split(path)
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        done.append(part)
        if _covered(done, mounts):
            raise Unknown(path)
        host = os.path.join(rootfs, *done)
        try:
            st = os.lstat(host)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR) and not _mount_below(done, mounts):
                return None
            raise Unknown(path) from None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise Unknown(path)
            try:
                target = os.readlink(host)
            except OSError:
                raise Unknown(path) from None
            done.pop()
            if target.startswith("/"):
                done = []
            todo = _split(target) + todo
            continue
        if todo and not stat.S_ISDIR(st.st_mode):
            return None  # a file where a directory should be: ENOTDIR, as not found
    if not done:
        try:
            return os.stat(rootfs)
        except OSError:
            raise Unknown(path) from None
    return os.lstat(os.path.join(rootfs, *done))


def _runnable(st: os.stat_result) -> bool:
    """Go's findExecutable: not a directory, some execute bit."""
    return not stat.S_ISDIR(st.st_mode) and bool(st.st_mode & 0o111)


def command_problem(args: Sequence[str], env: Sequence[str], cwd: str, rootfs: str,
                    mounts: Sequence[str] = ()) -> str:
    """runc's words for a process.args[0] that cannot run in `rootfs`, or "": a path
    (a name with `/`, relative to `cwd`) that does not exist or is a directory or not
    executable; a name found in no directory of the container's PATH (process.env's,
    else DEFAULT_PATH) as an executable file."""
    if not args or not args[0]:
        return ""
    name = args[0]
    try:
        if "/" in name:
            st = resolve(rootfs, os.path.join(cwd or "/", name), mounts)
            if st is None:
                return f'exec: "{name}": stat {name}: no such file or directory'
            return "" if _runnable(st) else f'exec: "{name}": permission denied'
        path = next((e[5:] for e in reversed(env) if e.startswith("PATH=")), DEFAULT_PATH)
        for directory in path.split(":"):
            if not directory.startswith("/"):
                continue  # a relative PATH entry depends on the cwd: Go skips it too
            try:
                st = resolve(rootfs, os.path.join(directory, name), mounts)
            except Unknown:
                return ""
            if st is not None and _runnable(st):
                return ""
    except Unknown:
        return ""
    return f'exec: "{name}": executable file not found in $PATH'


def mount_destinations(raw: object) -> list[str]:
    """config.json's mounts[].destination (the strings among them)."""
    mounts = raw.get("mounts") if isinstance(raw, dict) else None
    if not isinstance(mounts, list):
        return []
    return [m["destination"] for m in mounts
            if isinstance(m, dict) and isinstance(m.get("destination"), str)]
