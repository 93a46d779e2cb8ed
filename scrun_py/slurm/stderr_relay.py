"""The container step's stderr, minus srun's own exit report (which lines those are
is slurm/stderr_filter.py's to say).

The step's stderr goes through a pipe to this relay, which passes every byte the
filter lets through on, unchanged and unbuffered.  Not used with a terminal: there
the pty carries everything.

One daemon thread copies, with blocking writes: an engine that stops reading makes the
container's stderr writes wait, as they would with the runtime's own pipe, and never
stalls the anchor or keeps it alive at exit.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading

from scrun_py.slurm.stderr_filter import LineFilter

_CHUNK = 65536
#: how much of the end of what it passed on the relay keeps (`tail`)
TAIL_BYTES = 1024
CLOSE_WAIT_S = 1.0
DRAIN_S = 5.0  # after srun exits: what the container wrote last still arrives


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


class StderrRelay:
    """A pipe for the step's stderr, and the copy to `out_fd` minus srun's exit line."""

    def __init__(self, out_fd: int = 2, runtime_marker: bytes | None = None) -> None:
        self.out_fd = out_fd
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)  # close() stops the copy
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._filter = LineFilter(runtime_marker)
        self.tail = b""  # the end of what was passed on: exec reads the runtime's last word

    @property
    def launch_failure(self) -> str | None:
        """Slurm's reason when it could not create the step (see LineFilter)."""
        return self._filter.launch_failure

    @property
    def runtime_process(self) -> tuple[int, int, str] | None:
        """exec's node runtime (pid, start time, node) once its marker line came (see
        LineFilter)."""
        return self._filter.runtime_process

    @property
    def transient_failure(self) -> bool:
        """The step was not created because slurmctld did not answer: launching it
        again later can work (see LineFilter)."""
        return self._filter.transient_failure

    def start(self) -> None:
        """Call once the step has its copy of `write_fd`: ours is closed here."""
        os.close(self.write_fd)
        self.write_fd = -1
        self._thread = threading.Thread(target=self._copy, name="scrun-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        """Until EOF (every writer, srun and its helpers, has gone) or close(); the read
        end and the wake pipe's are this thread's to close."""
        filt, failed = self._filter, False
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake_r in ready:
                    break
                try:
                    data = os.read(self.read_fd, _CHUNK)
                except InterruptedError:
                    continue
                except OSError:
                    data = b""
                out = filt.feed(data) if data else filt.finish()
                if out:
                    self.tail = (self.tail + out)[-TAIL_BYTES:]
                if out and not failed:
                    try:
                        _write_all(self.out_fd, out)
                    except OSError:
                        failed = True  # the engine closed its end: drop the rest
                if not data:
                    break
        finally:
            for fd in (self.read_fd, self._wake_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.read_fd = self._wake_r = -1
            self._done.set()

    def drain(self, timeout_s: float = DRAIN_S) -> None:
        """Wait until everything the step wrote has been passed on (EOF, then written)."""
        if self._thread is not None:
            self._done.wait(timeout_s)

    def close(self) -> None:
        """Stop copying and close every end (also after a failed launch)."""
        if self._wake_w >= 0:
            if self._thread is not None:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")
                self._thread.join(CLOSE_WAIT_S)  # unless stuck writing to the engine
            with contextlib.suppress(OSError):
                os.close(self._wake_w)
            self._wake_w = -1
        fds = [self.write_fd] if self._thread is not None else [
            self.read_fd, self.write_fd, self._wake_r]
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.write_fd = -1
        if self._thread is None:
            self.read_fd = self._wake_r = -1
