"""The container's pid: a small process in namespaces of its own that are empty.

Engines and tools take the pid a runtime reports (`state`, `--pid-file`) as the
container's init and enter its namespaces through /proc/PID/ns: buildah's RUN steps
hand /proc/PID/ns/net to netavark, `podman top` joins /proc/PID/ns/mnt and reads
/proc there, `nsenter -t PID` does what it is told.  The container itself runs on a
compute node, so no process on the login node is its init; the anchor lives in the
login node's namespaces and must not be offered.  The pid reported is this holder's: a
process forked from the anchor before its heavy imports, in

* a new network namespace (only `lo`, down),
* a new PID namespace, where it is pid 1 (/proc there lists it alone),
* a new mount namespace (every mount private) with a fresh /proc of that PID namespace,
* a new user namespace mapping only the caller's own uid and gid, when the caller lacks
  the capability to make the others (an ordinary user; root, and root of an engine's
  user namespace, make them without one).

The engines' monitors (conmon, containerd's shim) are child subreapers: they wait for
the reported pid and take its exit status as the container's.  The holder is forked
through a middle process that exits at once, so it is orphaned at birth and reparented
to the nearest subreaper (to init without one): the monitor reaps it, never the anchor.
Two pipes tie it to the anchor:

* the anchor → holder pipe carries the container's exit code, written when the anchor
  has finished (stage_out run, job ended, state `stopped`); the holder exits with it.
  EOF without a code (the anchor was killed) ends it with 137, as a SIGKILL would;
* the holder → anchor pipe carries, one byte each, the signals sent straight to the
  holder's pid that it relays (RELAYED); its EOF tells the anchor the holder died (a
  SIGKILL, the one signal a PID namespace's init cannot refuse from outside), and the
  anchor then stops the container as if it had been killed.

As pid 1 of its namespace the holder receives, from outside, only SIGKILL, SIGSTOP and
the signals it has a handler for: RELAYED, each of which the anchor delivers as `kill`
would.  Every other signal sent to the pid is discarded by the kernel.

When the namespaces cannot be made (user namespaces disabled, a seccomp filter), start
returns why, and the anchor is the reported pid as before (with a warning record).

Once its namespaces are made, the holder becomes /bin/sh running the waiter of
anchor/waiter.py (the traps of the relays, then a `read` of the exit code): a Python
interpreter kept for the container's whole life would cost the login node several MB
per container, the shell a few hundred kB.  Where /bin/sh cannot be run, the holder
relays and waits in its own process.

Imports: os and sys at module level (the forked anchor calls `start` before anything
else); ctypes only in the middle process; threading only in the anchor's `watch`.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

# clone(2) flags
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# mount(2) flags
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_PRIVATE = 0x40000

#: the exit code when the anchor went away without telling one (it was killed)
ANCHOR_LOST_CODE = 137
#: the signals a holder relays to the anchor: those whose default action ends a process
#: and that an engine or a user sends to a container's pid (conmon relays its own INT,
#: TERM and QUIT to it); the numbers are Linux's on every architecture scrun-py runs on
RELAYED = (1, 2, 3, 10, 12, 14, 15)  # HUP INT QUIT USR1 USR2 ALRM TERM
COMM = "scrun-pid"
#: how long the anchor waits for the holder to exit once told its code
RELEASE_WAIT_S = 2.0


class NsHolder:
    """The holder as the anchor sees it: its pid (in the anchor's PID namespace) and the
    anchor's ends of the two pipes.  The middle process makes it while the anchor goes
    on with its imports: `settle` waits for its report."""

    def __init__(self, middle: int, report_read: int, code_write: int,
                 events_read: int) -> None:
        self.pid = 0
        self.problem = ""  # why there is no holder, once settled without one
        self._middle = middle
        self._report_read = report_read
        self._code_write = code_write
        self._events_read = events_read
        self.released = False

    def settle(self) -> bool:
        """Wait for the middle process's report: whether the holder runs (`pid`), else
        `problem` says why (and nothing of it is left)."""
        if self._report_read < 0:
            return self.pid > 0
        report = _read_all(self._report_read)
        self._report_read = -1
        try:
            os.waitpid(self._middle, 0)
        except ChildProcessError:
            pass
        pid, self.problem = parse_report(report)
        if pid is None:
            self.released = True
            os.close(self._code_write)  # a holder that did start but failed ends at EOF
            os.close(self._events_read)
            return False
        self.pid = pid
        return True

    def watch(self, on_signal: Callable[[int], None], on_lost: Callable[[], None]) -> None:
        """Call `on_signal(N)` for each signal the holder relays and `on_lost()` once if
        it dies before `release`, from a daemon thread."""
        from scrun_py.base import threads

        def read() -> None:
            while True:
                try:
                    data = os.read(self._events_read, 64)
                except InterruptedError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    break
                for signum in data:
                    on_signal(signum)
            if not self.released:
                on_lost()

        threads.spawn(read, "scrun-pid-watch")

    def alive(self) -> bool:
        """Whether the holder still runs (its events pipe has no EOF yet)."""
        import select

        try:
            ready, _, _ = select.select([self._events_read], [], [], 0)
        except (OSError, ValueError):
            return False
        return not ready

    def release(self, code: int, wait_s: float = RELEASE_WAIT_S) -> None:
        """Tell the holder the container's exit code, and wait up to `wait_s` for it to
        exit with it (its end of the events pipe closes as it exits): whoever waits for
        the anchor (`run`, a failed create) finds the holder gone too."""
        if not self.settle() or self.released:
            return
        self.released = True
        try:
            os.write(self._code_write, str(code & 0xFF).encode())
        except OSError:
            pass  # it is gone already
        try:
            os.close(self._code_write)
        except OSError:
            pass
        drain(self._events_read, wait_s)


def drain(fd: int, wait_s: float) -> None:
    """Read the pipe `fd` until its writers are gone (EOF) or `wait_s` has passed."""
    import select
    import time

    deadline = time.monotonic() + wait_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            ready, _, _ = select.select([fd], [], [], left)
            if ready and not os.read(fd, 4096):
                return
        except InterruptedError:
            continue
        except (OSError, ValueError):
            return


def start(ready_fd: int = -1) -> NsHolder | str:
    """Fork the middle process that makes the holder; the holder (`settle` it before
    use), or why not even that fork was possible.

    `ready_fd`, create's readiness pipe, stays open in the holder until it exits (it
    never writes to it): a create that fails reads that pipe to its end, and so returns
    only once the anchor and the holder are both gone.  Call while this process has one
    thread (the forked anchor before its imports).
    """
    code_read, code_write = os.pipe2(os.O_CLOEXEC)
    events_read, events_write = os.pipe2(os.O_CLOEXEC)
    report_read, report_write = os.pipe2(os.O_CLOEXEC)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        middle = os.fork()
    except OSError as exc:
        for fd in (code_read, code_write, events_read, events_write, report_read,
                   report_write):
            os.close(fd)
        return f"fork: {exc.strerror}"
    if middle == 0:
        _middle(code_read, events_write, report_write, ready_fd)
    for fd in (code_read, events_write, report_write):
        os.close(fd)
    return NsHolder(middle, report_read, code_write, events_read)


def parse_report(report: bytes) -> tuple[int | None, str]:
    """The holder's pid from the middle's and the holder's report lines (`pid N`, then
    `ok`), or None and why not."""
    lines = report.decode(errors="replace").splitlines()
    pid = None
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "error":
            return None, rest
        if word == "pid" and rest.isdigit():
            pid = int(rest)
    if pid is None or "ok" not in lines:
        return None, "the namespace holder exited before it was ready"
    return pid, ""


def _read_all(fd: int) -> bytes:
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _say(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode() + b"\n")
    except OSError:
        pass


def _keep_only(keep: tuple[int, ...]) -> None:
    """Close every descriptor above 2 but `keep` (create's readiness pipe, the spec pipe
    and the anchor's other files must not stay open in a process that outlives them)."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def unshare_flags(euid: int) -> int:
    """The namespaces to make: a user namespace too unless this is (some namespace's)
    root, which may make the others itself."""
    flags = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS
    return flags if euid == 0 else flags | CLONE_NEWUSER


def _middle(code_read: int, events_write: int, report: int, ready_fd: int) -> NoReturn:
    """The middle process: make the namespaces, fork the holder (pid 1 of the new PID
    namespace), report its pid and exit, orphaning it."""
    try:
        _keep_only((code_read, events_write, report, *((ready_fd,) if ready_fd >= 0 else ())))
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        euid, egid = os.geteuid(), os.getegid()
        flags = unshare_flags(euid)
        failed = libc.unshare(flags) != 0
        if failed and euid == 0:
            # root of a user namespace that lacks CAP_SYS_ADMIN there: with one of its own
            flags |= CLONE_NEWUSER
            failed = libc.unshare(flags) != 0
        if failed:
            _say(report, f"error unshare: {os.strerror(ctypes.get_errno())}")
            os._exit(1)
        if flags & CLONE_NEWUSER and not _map_ids(euid, egid, report):
            os._exit(1)
        holder = os.fork()
        if holder == 0:
            _holder(libc, code_read, events_write, report, ready_fd)
        _say(report, f"pid {holder}")
        os._exit(0)
    except BaseException as exc:  # reported, never a traceback
        _say(report, f"error {type(exc).__name__}: {exc}")
        os._exit(1)


def _map_ids(uid: int, gid: int, report: int) -> bool:
    """Map the caller's own uid and gid in the new user namespace (setgroups denied, as
    an unprivileged process must)."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        try:
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            if name == "setgroups" and exc.errno == 2:
                continue  # a kernel before 3.19
            _say(report, f"error {name}: {exc.strerror}")
            return False
    return True


def _holder(libc: object, code_read: int, events_write: int, report: int,
            ready_fd: int) -> NoReturn:
    """The holder: a fresh /proc, stdio on /dev/null; then the shell of anchor/waiter.py
    in its place, or, where no shell can be run, the relays and the wait for the exit
    code in this process."""
    code = ANCHOR_LOST_CODE
    try:
        import ctypes

        mount = libc.mount  # type: ignore[attr-defined]
        if mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            _say(report, f"error mount --make-rprivate /: {os.strerror(ctypes.get_errno())}")
            os._exit(1)
        if mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
            _say(report, f"error mount /proc: {os.strerror(ctypes.get_errno())}")
            os._exit(1)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        try:
            with open("/proc/self/comm", "w") as fh:
                fh.write(COMM)
        except OSError:
            pass
        from scrun_py.anchor import waiter

        try:
            waiter.become((code_read, events_write, report,
                           *((ready_fd,) if ready_fd >= 0 else ())),
                          title=COMM, relayed=RELAYED, lost_code=ANCHOR_LOST_CODE)
        except OSError as exc:  # the descriptors moved: report on the new one
            _say(waiter.REPORT_FD, f"error {waiter.SHELL}: {exc.strerror}")
            os._exit(1)
        _relay_signals(events_write)
        _say(report, "ok")
        os.close(report)
        code = wait_code(code_read)
    finally:
        os._exit(code)


def _relay_signals(events_write: int) -> None:
    import _signal  # type: ignore[import-not-found]  # the C module: signal imports enum

    def relay(signum: int, _frame: object) -> None:
        try:
            os.write(events_write, bytes((signum,)))
        except OSError:
            pass  # the anchor is gone: the code pipe's EOF follows

    _signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)
    for signum in RELAYED:
        _signal.signal(signum, relay)


def wait_code(code_read: int) -> int:
    """The exit code the anchor writes on `code_read` before it closes it;
    ANCHOR_LOST_CODE at EOF without one."""
    data = _read_all(code_read)
    try:
        return int(data) & 0xFF if data else ANCHOR_LOST_CODE
    except ValueError:
        return ANCHOR_LOST_CODE
