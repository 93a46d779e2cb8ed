"""What srun writes on the container step's stderr that is srun's, not the container's.

For a task that exits non-zero, srun prints `srun: error: NODE: task 0: Exited with
exit code N` on its stderr, which is the container's stderr: runc prints nothing
there, and `docker run`/`podman run` users would see a line their program never
wrote.  The filter drops exactly that report and passes every other byte through.

srun's report is its own write, but the pipe may hand it over in one read with the
container's last bytes.  When the container's last line has no newline (`printf tail
>&2; exit 3`), the report follows that text on the same line.  So a report is dropped
when it starts a line, or when it ends the stream; a line that merely ends like a
report and is followed by more output is the container's own, and passes.  Text
without a newline, such as a prompt, is not held back unless it could be the start
of srun's report.  The filter also notes srun's "Unable to create step" line, which
it passes on: the anchor launches such a step again when slurmctld did not answer.
exec's filter (`runtime_marker`) also takes out the line its node script writes before
it becomes the node's runtime (node_step.RUNTIME_MARKER: the runtime's pid, its start
time and the node), the first such line only, and keeps what it says.
Pure: the result does not depend on how the bytes are split into reads.
"""

from __future__ import annotations

import re

from scrun_py.slurm.parse import step_launch_failure, transient_launch_failure

_SRUN_EXIT = re.compile(
    rb"srun: error: [^\s:]+: tasks? [0-9,\-]+: Exited with exit code \d+\r?\n\Z")
_PREFIX = b"srun: error: "
_MAX_LINE = 512  # srun's line is far shorter; longer text is never held back


def _hold_from(rest: bytes) -> int:
    """Where in `rest` (no newline) a report of srun's could begin; len(rest) if nowhere.
    A report holds the prefix once, at its start: only the last prefix can begin one."""
    found = rest.rfind(_PREFIX)
    if found >= 0 and len(rest) - found < _MAX_LINE:
        return found
    for size in range(min(len(_PREFIX) - 1, len(rest)), 0, -1):
        if rest.endswith(_PREFIX[:size]):
            return len(rest) - size
    return len(rest)


class LineFilter:
    """Pure: feed bytes, get the bytes to pass on."""

    def __init__(self, runtime_marker: bytes | None = None) -> None:
        self._marker = runtime_marker  # None once its line was seen
        # the line after runtime_marker, split: the node runtime's pid, start time, node
        self.runtime_process: tuple[int, int, str] | None = None
        self._held = b""      # may still become srun's report
        self._bol = True      # _held (or the next byte) starts a line
        self._pending = b""   # a report after unterminated text: dropped only at the end
        # srun's "Unable to create step for job N: REASON" (passed on): the step never ran
        self.launch_failure: str | None = None

    def feed(self, data: bytes) -> bytes:
        if not data:
            return b""
        out = [self._pending]
        self._pending = b""
        buf, bol, self._held = self._held + data, self._bol, b""
        start = 0
        while (nl := buf.find(b"\n", start)) >= 0:
            out.append(self._line(buf[start:nl + 1], bol or start > 0, nl + 1 == len(buf)))
            start = nl + 1
        rest = buf[start:]
        hold = _hold_from(rest)
        if self._may_be_marker(rest, bol or start > 0):
            hold = 0
        out.append(rest[:hold])
        self._held = rest[hold:]
        self._bol = hold == 0 and (bol or start > 0)
        return b"".join(out)

    def _may_be_marker(self, rest: bytes, at_line_start: bool) -> bool:
        marker = self._marker
        return (marker is not None and at_line_start and len(rest) < _MAX_LINE
                and rest[:len(marker)] == marker[:len(rest)])

    def _take_marker(self, line: bytes) -> bool:
        """`line` is the runtime's marker line: its words kept, True (the line dropped)."""
        assert self._marker is not None
        words = line[len(self._marker):].decode(errors="replace").split()
        if len(words) != 3 or not all(w.isascii() and w.isdigit() for w in words[:2]):
            return False
        self.runtime_process = (int(words[0]), int(words[1]), words[2])
        self._marker = None
        return True

    def _line(self, line: bytes, at_line_start: bool, last: bool) -> bytes:
        if (self._marker is not None and at_line_start and line.startswith(self._marker)
                and self._take_marker(line)):
            return b""
        match = _SRUN_EXIT.search(line)
        if match is None:
            if line.startswith(_PREFIX):
                self.launch_failure = step_launch_failure(line) or self.launch_failure
            return line
        if match.start() == 0 and at_line_start:
            return b""
        if last:
            self._pending = line[match.start():]
            return line[:match.start()]
        return line

    def finish(self) -> bytes:
        held, self._held, self._pending, self._bol = self._held, b"", b"", True
        return held

    @property
    def transient_failure(self) -> bool:
        """srun could not create the step because slurmctld did not answer."""
        return (self.launch_failure is not None
                and transient_launch_failure(self.launch_failure))
