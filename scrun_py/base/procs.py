"""Processes and accounts: the one home for wait statuses, user names, /proc reads and
running a short command.  Every caller in scrun-py goes through these."""

from __future__ import annotations

import os

# `state` imports this module: nothing here imports typing, dataclasses, signal (its
# enums) or contextlib until it is used
TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import BinaryIO, Protocol

    class Child(Protocol):
        """A started child: subprocess.Popen, or procs.Spawned."""

        pid: int
        returncode: int | None

        def poll(self) -> int | None: ...

        def wait(self) -> int: ...

#: status of a command killed after its timeout (coreutils timeout's convention)
TIMEOUT_STATUS = 124
#: status of a command that could not be started (the shell's convention)
NOT_STARTED_STATUS = 127


def exit_code(returncode: int) -> int:
    """subprocess returncode (negative N for death by signal N) → shell-style
    0..255: 128+N for a signal."""
    return 128 - returncode if returncode < 0 else returncode & 0xFF


def user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# -- /proc ------------------------------------------------------------------------------------

def _stat_fields(pid: int | str) -> list[bytes]:
    """The fields of /proc/<pid>/stat after `(comm)`: [state, ppid, …]; [] if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2 :].split()


def process_start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat; '' if the process is gone or a zombie."""
    rest = _stat_fields(pid)
    if len(rest) < 20 or rest[0] in (b"Z", b"X"):
        return ""
    return rest[19].decode()


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        rest = _stat_fields(entry)
        if len(rest) > 1 and rest[1].isdigit():
            children.setdefault(int(rest[1]), []).append(int(entry))
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        out.append(child)
        stack.extend(children.get(child, []))
    return out


def comm(pid: int) -> str:
    """The process's command name (/proc/<pid>/comm); '' if gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def set_comm(name: str) -> None:
    """Name this process in ps/top (15 bytes at most)."""
    try:
        with open("/proc/self/comm", "w") as fh:
            fh.write(name[:15])
    except OSError:
        pass


def _id_map(kind: str) -> list[tuple[int, int, int]]:
    """/proc/self/{uid,gid}_map as (inside, outside, count) rows; [] if unreadable."""
    try:
        with open(f"/proc/self/{kind}_map") as fh:
            return [(int(a), int(b), int(c)) for a, b, c in (ln.split() for ln in fh)]
    except (OSError, ValueError):
        return []


def ns_root_host_id(kind: str = "uid") -> int:
    """The id that this user namespace's 0 is in the parent namespace (0 if none/unmapped)."""
    return next((outside for inside, outside, _ in _id_map(kind) if inside == 0), 0)


def real_uid() -> int:
    """The user behind this process: getuid(), except as root of a user namespace
    (rootless podman runs the runtime as its namespace's 0), where it is the uid that 0
    stands for outside."""
    uid = os.getuid()
    return ns_root_host_id("uid") if uid == 0 else uid


def in_user_namespace() -> bool:
    """True unless this is the initial user namespace (uid_map "0 0 4294967295")."""
    return _id_map("uid") != [(0, 0, 4294967295)]


# -- running a short command ------------------------------------------------------------------

class Result:
    """What a short command did."""

    __slots__ = ("error", "output", "status", "stderr", "timed_out")

    def __init__(self, status: int, output: bytes, timed_out: bool = False,
                 error: str = "", stderr: bytes = b"") -> None:
        self.status = status  # exit code, 128+N for signal N, 124 on timeout, 127: not run
        self.output = output  # stdout and stderr, interleaved; stdout alone with `apart`
        self.timed_out = timed_out
        self.error = error  # why it could not start (strerror), '' if it ran
        self.stderr = stderr  # stderr, with `apart` only

    def _key(self) -> tuple[int, bytes, bool, str, bytes]:
        return self.status, self.output, self.timed_out, self.error, self.stderr

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Result) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Result(status={self.status!r}, output={self.output!r}, "
                f"timed_out={self.timed_out!r}, error={self.error!r}, "
                f"stderr={self.stderr!r})")

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")


def wait_child(proc: Child, timeout_s: float | None) -> int | None:
    """`proc.wait(timeout_s)`, noticing the exit when it happens; None on timeout.

    Popen.wait with a timeout polls with sleeps that double up to 50 ms, so a child
    that exits after 5 ms is seen after 7, one of 8 ms after 15.  The anchor waits so for
    salloc at the end of every job, on the path to its own exit.  A pidfd wakes select
    at the exit instead."""
    import select

    if proc.returncode is not None:
        return proc.returncode
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # reaped by another waiter meanwhile (or no pidfd here)
        return _poll_until(proc, timeout_s)
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)
    if not readable:
        return proc.poll()
    return proc.wait()


def _poll_until(proc: Child, timeout_s: float | None) -> int | None:
    import time

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while (code := proc.poll()) is None:
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(0.005)
    return code


class Spawned:
    """A child started by `spawn`: the part of subprocess.Popen the allocation holder
    uses (pid, returncode, poll, wait, send_signal, kill, stdin, stdout)."""

    def __init__(self, pid: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
        import threading

        self.pid = pid
        self.returncode: int | None = None
        self.stdin: BinaryIO | None = stdin
        self.stdout: BinaryIO | None = stdout
        self._lock = threading.Lock()  # one waitpid at a time, as Popen has

    def poll(self) -> int | None:
        if self.returncode is None and self._lock.acquire(blocking=False):
            try:
                if self.returncode is None:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                    if pid == self.pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # reaped behind our back: Popen says 0 then too
                self.returncode = 0
            finally:
                self._lock.release()
        return self.returncode

    def wait(self) -> int:
        with self._lock:
            if self.returncode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    self.returncode = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    self.returncode = 0
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        from scrun_py.base.signames import SIGKILL

        self.send_signal(SIGKILL)


def resolve_program(name: str, env: Mapping[str, str]) -> str:
    """The absolute path of the program `name`, found before any change of directory.

    A name with a '/' must be absolute.  A bare name is looked up in the absolute
    entries of `env`'s PATH only (os.defpath when it has none): an empty or relative
    entry would name a directory relative to wherever the program is started, which
    an image can choose (SCRUN_WORKING_DIR), so those entries are skipped (Go's
    exec.LookPath likewise refuses a program found through one, since Go 1.19).  The
    program must be a regular file this process may execute.
    FileNotFoundError when there is none, PermissionError when the only ones found
    cannot be executed; the exception's filename is `name`."""
    if "/" in name:
        if not os.path.isabs(name):
            raise _not_runnable(name, "relative program path refused (an absolute path "
                                      "is needed)")
        if _executable(name):
            return name
        raise _not_runnable(name, "" if os.path.exists(name) else "No such file or directory")
    skipped = denied = False
    # PATH read here rather than by os.get_exec_path, which imports warnings
    for entry in env.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isabs(entry):
            skipped = True
            continue
        path = os.path.join(entry, name)
        if _executable(path):
            return path
        denied = denied or os.path.exists(path)
    if denied:  # as execvp: one that exists but cannot be run is reported
        raise _not_runnable(name, "")
    raise _not_runnable(name, "not found on PATH" + (
        " (relative PATH entries are ignored)" if skipped else ""))


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _not_runnable(name: str, missing: str) -> OSError:
    """FileNotFoundError saying `missing`; PermissionError when that is ''."""
    import errno

    if missing:
        return FileNotFoundError(errno.ENOENT, missing, name)
    return PermissionError(errno.EACCES, "Permission denied (not an executable file)", name)


def spawn(argv: Sequence[str], env: Mapping[str, str], *, stderr: int,
          cwd: str | None = None) -> Spawned:
    """Start `argv` in a session of its own, with pipes on its stdin and stdout and
    `stderr` (a file descriptor) as its stderr; OSError when it cannot be started.

    os.posix_spawn rather than subprocess: the anchor spawns salloc this way before it
    has imported subprocess (with locale, re and selectors: base/lean.py; all of it
    all of it on `create`'s critical path).  argv[0] is resolved to an absolute path by
    `resolve_program` (env's PATH, absolute entries only) before anything else, so the
    program run never depends on `cwd`.  posix_spawn cannot change directory: with
    `cwd`, /bin/sh does, then execs the absolute path (the program's argv[0] is then that
    path; without `cwd` it is argv[0] as given).  Unlike subprocess, descriptors are not
    closed: the child gets those the caller made inheritable (Python makes none by
    itself)."""
    from scrun_py.base.signames import SIGPIPE, SIGXFSZ

    program = resolve_program(argv[0], env)
    args = list(argv)
    if cwd is not None:
        args = ["/bin/sh", "-c", 'cd -- "$0" && exec "$@"', cwd, program, *args[1:]]
        program = "/bin/sh"
    in_read, in_write = os.pipe2(os.O_CLOEXEC)
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, in_read, 0), (os.POSIX_SPAWN_DUP2, out_write, 1),
                   (os.POSIX_SPAWN_DUP2, stderr, 2)]
        # the interpreter ignores these two, and an ignored signal stays ignored across
        # exec: restored, as subprocess does
        restore = (SIGPIPE, SIGXFSZ)
        pid = os.posix_spawn(program, args, env, file_actions=actions, setsid=True,
                             setsigdef=restore)
    except BaseException:
        for fd in (in_read, in_write, out_read, out_write):
            os.close(fd)
        raise
    os.close(in_read)
    os.close(out_write)
    return Spawned(pid, open(in_write, "wb", buffering=0), open(out_read, "rb", buffering=0))


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout_s: float | None = 30.0, stdin: bytes | None = None,
        apart: bool = False, cwd: str | None = None) -> Result:
    """Run `argv` in its own session (stdin /dev/null unless given), in `cwd` when
    given; on timeout the whole process group is killed.  Its stdout and stderr
    interleaved in `output`; with `apart`, stdout in `output` and stderr in `stderr`.

    argv[0] is resolved by `resolve_program` (the PATH of `env`, else of this process,
    absolute entries only) and run by that path: Popen's own search would honour an
    empty or relative PATH entry.  A program that is not found (or cannot be run) is a
    Result with NOT_STARTED_STATUS and `error` saying why, as one that fails to start."""
    import subprocess

    try:
        program = resolve_program(argv[0], os.environ if env is None else env)
        proc = subprocess.Popen(
            list(argv), executable=program,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE if apart else subprocess.STDOUT,
            env=dict(env) if env is not None else None, start_new_session=True, cwd=cwd)
    except OSError as exc:
        return Result(NOT_STARTED_STATUS, f"{argv[0]}: {exc.strerror}\n".encode(),
                      error=exc.strerror or str(exc))
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        from scrun_py.base.signames import SIGKILL

        try:
            os.killpg(proc.pid, SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return Result(TIMEOUT_STATUS, out, timed_out=True, stderr=err or b"")
    return Result(exit_code(proc.returncode), out, stderr=err or b"")
