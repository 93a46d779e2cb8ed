"""What srun writes on the container step's stderr that is srun's, not the container's.

For a task that exits non-zero, srun prints `srun: error: NODE: task 0: Exited with
exit code N` on its stderr, which is the container's stderr: runc prints nothing
there, and `docker run`/`podman run` users would see a line their program never
wrote.  The filter drops exactly that line and passes every other byte through (text
without a newline, such as a prompt, is not held back unless it could be the start of
srun's line).  It also notes srun's "Unable to create step" line, which it passes on:
the anchor launches such a step again when slurmctld did not answer.  Pure.
"""

from __future__ import annotations

import re

from scrun_py.slurm.parse import step_launch_failure, transient_launch_failure

_SRUN_EXIT = re.compile(rb"srun: error: [^\s:]+: tasks? [0-9,\-]+: Exited with exit code \d+\r?\n")
_PREFIX = b"srun: error: "
_MAX_LINE = 512  # srun's line is far shorter; longer text is never held back


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

    @property
    def transient_failure(self) -> bool:
        """srun could not create the step because slurmctld did not answer."""
        return (self.launch_failure is not None
                and transient_launch_failure(self.launch_failure))
