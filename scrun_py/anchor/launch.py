"""Starting the anchor process: forked from `create`, or a new interpreter behind
`unshare` when `create` is root inside a user namespace (rootless podman).

The fork happens early (`EarlyAnchor.fork`, before create reads the bundle): the child
imports what the anchor needs while the parent validates, on the other CPU, then waits
for its spec on a pipe.  If create fails first, the child is killed before it did
anything.  The readiness pipe (anchor/readiness.py) exists from the fork on.

The spec goes over a pipe on both paths, never on a command line (late_argv).
"""

from __future__ import annotations

import os
import sys

from scrun_py.base import procs
from scrun_py.base.userns import host_ids, userns_prefix

# cli/fast_path.py forks the anchor right after this import, and everything imported
# before the fork is on create's critical path: os and sys only (subprocess alone
# imports locale, re, signal, enum, threading; the child and the parent each import what
# they use after)
TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from typing import NoReturn

    from scrun_py.anchor.handoff import AnchorSpec
    from scrun_py.anchor.nsholder import NsHolder
    from scrun_py.base.invocation import Invocation


class AnchorProcess:
    """The anchor, a child of this process."""

    def __init__(self, pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._popen = popen

    def wait(self) -> int:
        if self.returncode is None:
            if self._popen is not None:
                self.returncode = self._popen.wait()
            else:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)


class Started:
    """An anchor that has its spec: the process and the read end of its readiness pipe."""

    def __init__(self, process: AnchorProcess, ready_read: int) -> None:
        self.process = process
        self.ready_read = ready_read


class EarlyAnchor:
    """A forked anchor that is still waiting for its spec."""

    def __init__(self, pid: int, spec_write: int, ready_read: int, ready_fd: int) -> None:
        self.pid = pid
        self.ready_fd = ready_fd  # the readiness pipe's write end, as the child numbers it
        self.sent = False
        self._spec_write = spec_write
        self._ready_read = ready_read

    @classmethod
    def fork(cls, slurm_conf: str | None) -> EarlyAnchor | None:
        """Fork the anchor now (`slurm_conf`: create's -f, if given); None when it must
        be a new interpreter (userns_prefix)."""
        if host_ids() is not None:
            return None
        ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
        pid, spec_write = _fork(ready_read, ready_write, slurm_conf)
        os.close(ready_write)
        return cls(pid, spec_write, ready_read, ready_write)

    def send(self, spec: AnchorSpec) -> Started:
        """Hand the spec over (OSError if the child is gone)."""
        data = spec.to_json().encode()
        self.sent = True
        spec_write, self._spec_write = self._spec_write, -1
        write_spec(spec_write, data)
        return Started(AnchorProcess(self.pid), self._ready_read)

    def abandon(self) -> None:
        """create failed before the spec was sent: end the child, which did nothing."""
        from scrun_py.base.signames import SIGKILL

        ready_read = self._ready_read
        if self._spec_write >= 0:
            try:
                os.close(self._spec_write)
            except OSError:
                pass
        self._spec_write = self._ready_read = -1
        try:
            os.kill(self.pid, SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        if ready_read >= 0:
            # the container's pid process (anchor/nsholder.py) holds the readiness pipe
            # open until it has exited: at its end, nothing of this create runs any more
            from scrun_py.anchor.nsholder import RELEASE_WAIT_S, drain

            drain(ready_read, RELEASE_WAIT_S)
            os.close(ready_read)


def _fork(ready_read: int, ready_write: int, slurm_conf: str | None) -> tuple[int, int]:
    """Fork the anchor, which waits for its spec on a new pipe and reports on
    `ready_write`; returns its pid and the pipe's write end."""
    spec_read, spec_write = os.pipe2(os.O_CLOEXEC)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(spec_write)
        os.close(ready_read)
        _child(spec_read, ready_write, slurm_conf)
    os.close(spec_read)
    return pid, spec_write


def _child(spec_read: int, ready_write: int, slurm_conf: str | None) -> NoReturn:
    """The anchor: imports, waits for its spec, runs; never returns into create."""
    rc = 1
    holder: NsHolder | str = ""
    try:
        os.setsid()
        keep = sorted((spec_read, ready_write))
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, 1 << 20)
        if slurm_conf is not None:
            # -f names the cluster for the Slurm commands the anchor runs too: engines
            # (dockerd's shim, conmon) do not pass SLURM_CONF through to the runtime.
            os.environ["SLURM_CONF"] = os.path.abspath(slurm_conf)
        # the container's pid, forked while this process is still small and has one thread
        from scrun_py.anchor import nsholder

        holder = nsholder.start(ready_write)
        from scrun_py.anchor.__main__ import preload, run_anchor
        from scrun_py.anchor.handoff import read_spec

        preload()
        data = read_spec(spec_read)
        # no spec: create failed (or died) before it had a container to give us
        rc = _run_spec(data, lambda spec: run_anchor(spec, holder)) if data else 0
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        if not isinstance(holder, str):
            holder.release(rc)
        os._exit(rc)


def _run_spec(data: bytes, run_anchor: Callable[[AnchorSpec], int]) -> int:
    from scrun_py.anchor.handoff import AnchorSpec

    spec = AnchorSpec.from_json(data.decode())
    if spec.console_socket:
        # with a terminal the container's stdio is the pty: like runc's init, the
        # anchor must not hold the caller's stdio open (containerd's shim reads
        # create's stdout/stderr to EOF before it takes the pty master)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
    return run_anchor(spec)


def start_late(inv: Invocation, spec: AnchorSpec, ready_read: int) -> AnchorProcess:
    """Start the anchor for a spec that is ready (the click path): a fork, or a new
    interpreter behind `unshare` (userns_prefix).  spec.ready_fd is inherited."""
    env = None
    if inv.slurm_conf is not None:
        env = {**os.environ, "SLURM_CONF": str(inv.slurm_conf)}
    prefix = _late_prefix()
    if prefix:
        import subprocess

        data = spec.to_json().encode()
        # the root and the id, which the job's environment has too, say whose anchor
        # this is in /proc/PID/environ (readable by its user and root only)
        env = {**(env if env is not None else os.environ), "SCRUN_ROOT": spec.root,
               "SCRUN_CONTAINER_ID": spec.container_id}
        stdio = subprocess.DEVNULL if spec.console_socket else None
        spec_read, spec_write = os.pipe2(os.O_CLOEXEC)
        try:
            argv = late_argv(prefix, spec_read)
            popen = subprocess.Popen(
                argv, executable=procs.resolve_program(argv[0], env),
                pass_fds=(spec.ready_fd, spec_read),
                start_new_session=True, close_fds=True, env=env,
                stdin=stdio, stdout=stdio, stderr=stdio)
        except BaseException:
            os.close(spec_write)
            raise
        finally:
            os.close(spec_read)
        try:
            write_spec(spec_write, data)
        except OSError as exc:
            # the reader is gone (unshare or the interpreter failed) or cannot be
            # written to: it must not live on without a spec
            popen.kill()
            rc = popen.wait()
            if isinstance(exc, BrokenPipeError):
                raise OSError(exc.errno, "it exited before it read its spec "
                                         f"(status {rc})") from exc
            raise
        return AnchorProcess(popen.pid, popen)
    pid, spec_write = _fork(ready_read, spec.ready_fd,
                            str(inv.slurm_conf) if inv.slurm_conf is not None else None)
    return EarlyAnchor(pid, spec_write, ready_read, spec.ready_fd).send(spec).process


def late_argv(prefix: list[str], spec_fd: int) -> list[str]:
    """The command line of the anchor as a new interpreter behind `prefix`: it reads
    its spec from the inherited `spec_fd`.  The spec (the container's args,
    annotations, imported SCRUN_* values) is never on a command line: any local user
    can read /proc/PID/cmdline, and execve refuses one argument over 128 KiB."""
    return [*prefix, sys.executable, "-P", "-m", "scrun_py.anchor", "--spec-fd", str(spec_fd)]


def write_spec(fd: int, data: bytes) -> None:
    """Write all of `data` to the pipe `fd`, then close it (OSError, e.g.
    BrokenPipeError, when the reader is gone; `fd` is closed either way)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _late_prefix() -> list[str]:
    """userns_prefix, its OSError naming unshare (create's message gives only strerror)."""
    try:
        return userns_prefix()
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.filename}: {exc.strerror}") from exc
