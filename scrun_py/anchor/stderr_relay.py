"""The container step's stderr, minus srun's own exit report.

For a task that exits non-zero, srun prints `srun: error: NODE: task 0: Exited with
exit code N` on its stderr, which is the container's stderr: runc prints nothing
there, and `docker run`/`podman run` users would see a line their program never
wrote.  The step's stderr therefore goes through a pipe to this relay, which drops
exactly that line and passes every other byte through unchanged and unbuffered
(text without a newline, such as a prompt, is not held back unless it could be the
start of srun's line).  Not used with a terminal: there the pty carries everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import threading

from scrun_py.slurm.parse import step_launch_failure

_SRUN_EXIT = re.compile(rb"srun: error: [^\s:]+: tasks? [0-9,\-]+: Exited with exit code \d+\r?\n")
_PREFIX = b"srun: error: "
_MAX_LINE = 512  # srun's line is far shorter; longer text is never held back
_CHUNK = 65536


class LineFilter:
    """Pure: feed bytes, get the bytes to pass on."""

    def __init__(self) -> None:
        self._held = b""
        # srun's "Unable to create step for job N: REASON" (passed on): the step never ran
        self.launch_failure: str | None = None

    def feed(self, data: bytes) -> bytes:
        buf = self._held + data
        self._held = b""
        out: list[bytes] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl + 1]
            if not _SRUN_EXIT.fullmatch(line):
                out.append(line)
                if line.startswith(_PREFIX):
                    self.launch_failure = step_launch_failure(line) or self.launch_failure
            start = nl + 1
        rest = buf[start:]
        if rest and len(rest) < _MAX_LINE and (_PREFIX.startswith(rest[:len(_PREFIX)])):
            self._held = rest  # may still become srun's line
        else:
            out.append(rest)
        return b"".join(out)

    def finish(self) -> bytes:
        held, self._held = self._held, b""
        return held


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class StderrRelay:
    """A pipe for the step's stderr, and the copy to `out_fd` minus srun's exit line.

    Reads are non-blocking on our own pipe, in the event loop.  Writes to the engine's
    stderr are blocking, in one daemon thread: a slow or stuck reader never stalls the
    anchor, and cannot keep it alive at exit (a pool thread would be joined).
    """

    def __init__(self, out_fd: int = 2) -> None:
        self.out_fd = out_fd
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(self.write_fd, True)  # the step's end: srun expects blocking writes
        self._chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._done: asyncio.Future[None] | None = None
        self._filter = LineFilter()

    @property
    def launch_failure(self) -> str | None:
        """srun's reason when it could not create the step (see LineFilter)."""
        return self._filter.launch_failure

    def start(self) -> None:
        """Call once the step has its copy of `write_fd`: ours is closed here."""
        os.close(self.write_fd)
        self.write_fd = -1
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        done = self._done

        def writer() -> None:
            failed = False
            while (chunk := self._chunks.get()) is not None:
                if not failed:
                    try:
                        _write_all(self.out_fd, chunk)
                    except OSError:
                        failed = True  # the engine closed its end: drop the rest
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(_finish, done)

        threading.Thread(target=writer, name="scrun-stderr", daemon=True).start()
        loop.add_reader(self.read_fd, self._readable)

    def _readable(self) -> None:
        filt = self._filter
        try:
            data = os.read(self.read_fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        out = filt.feed(data) if data else filt.finish()
        if out:
            self._chunks.put(out)
        if not data:  # EOF: every writer (srun and its helpers) has gone
            self._stop_reading()

    def _stop_reading(self) -> None:
        if self.read_fd >= 0:
            with contextlib.suppress(RuntimeError, ValueError):
                asyncio.get_running_loop().remove_reader(self.read_fd)
            os.close(self.read_fd)
            self.read_fd = -1
            self._chunks.put(None)

    async def drain(self, timeout_s: float) -> None:
        """Wait until everything the step wrote has been passed on (EOF, then written)."""
        if self._done is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._done), timeout_s)

    def close(self) -> None:
        """Stop copying and close both ends (also after a failed launch)."""
        if self._done is not None:
            self._stop_reading()
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.read_fd = self.write_fd = -1
