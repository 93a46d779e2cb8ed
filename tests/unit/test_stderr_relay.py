"""The step's stderr relay: srun's exit report is dropped, everything else passes."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os

import pytest

from scrun_py.slurm.stderr_filter import LineFilter
from scrun_py.slurm.stderr_relay import TAIL_BYTES, StderrRelay

SRUN_LINE = b"srun: error: vm: task 0: Exited with exit code 3\n"


def _through(*chunks: bytes) -> bytes:
    filt = LineFilter()
    return b"".join(filt.feed(c) for c in chunks) + filt.finish()


class TestLineFilter:
    def test_drops_only_srun_exit_report(self) -> None:
        assert b"err\nmore\n" == _through(b"err\n", SRUN_LINE, b"more\n")

    def test_other_srun_lines_pass(self) -> None:
        text = (b"srun: error: vm: task 0: Killed\n"
                b"srun: error: Unable to create step for job 5: Invalid\n"
                b"note: srun: error: vm: task 0: Exited with exit code 3\n"
                b"more\n")
        assert text == _through(text)

    @pytest.mark.parametrize("cut", range(0, 70))
    def test_report_after_unterminated_text_is_dropped_however_it_is_read(
            self, cut: int) -> None:
        stream = b"err\ntail" + SRUN_LINE
        assert b"err\ntail" == _through(stream[:cut], stream[cut:])

    def test_report_after_unterminated_text_passes_when_more_follows(self) -> None:
        stream = b"tail" + SRUN_LINE + b"more\n"
        for cut in range(len(stream) + 1):
            assert stream == _through(stream[:cut], stream[cut:])

    def test_report_after_a_long_unterminated_prefix_text_is_dropped(self) -> None:
        stream = b"srun: error: " + b"y" * 600 + SRUN_LINE
        cut = len(stream) - 20  # inside the report
        assert stream[:-len(SRUN_LINE)] == _through(stream[:cut], stream[cut:])

    def test_report_at_a_line_start_is_dropped_even_when_more_follows(self) -> None:
        assert b"a\nb\n" == _through(b"a\n" + SRUN_LINE + b"b\n")

    def test_line_split_across_chunks_is_still_dropped(self) -> None:
        assert b"a\n" == _through(b"a\nsrun: err", b"or: vm: tasks 0-1: Exited ",
                                  b"with exit code 7\n")

    def test_partial_text_is_not_held_back(self) -> None:
        filt = LineFilter()
        assert b"Password: " == filt.feed(b"Password: ")
        assert b"" == filt.finish()

    def test_possible_srun_prefix_waits_for_its_line(self) -> None:
        filt = LineFilter()
        assert b"" == filt.feed(b"srun: e")
        assert b"srun: eh?\n" == filt.feed(b"h?\n")

    def test_unterminated_tail_is_flushed_at_the_end(self) -> None:
        assert b"x\nsrun: error" == _through(b"x\nsrun: error")

    def test_binary_and_long_lines_pass_unchanged(self) -> None:
        blob = bytes(range(256)) * 300 + b"\n" + b"srun: error: " + b"y" * 600
        assert blob == _through(blob[:1000], blob[1000:])


MARKER = b"scrun-py exec runtime: "


def _marked(*chunks: bytes) -> tuple[bytes, tuple[int, int, str] | None]:
    filt = LineFilter(MARKER)
    out = b"".join(filt.feed(c) for c in chunks) + filt.finish()
    return out, filt.runtime_process


class TestRuntimeMarker:
    """exec's filter takes out the first line of its node script's marker, and keeps the
    runtime's pid, start time and node; every other byte passes."""

    def test_the_first_marker_line_is_taken_out_however_it_is_read(self) -> None:
        stream = b"srun: warning\n" + MARKER + b"4242 987 n3\nout\n" + MARKER + b"1 2 n1\n"
        for cut in range(len(stream) + 1):
            assert ((b"srun: warning\nout\n" + MARKER + b"1 2 n1\n", (4242, 987, "n3"))
                    == _marked(stream[:cut], stream[cut:]))

    @pytest.mark.parametrize("line", [
        b"x " + MARKER + b"4242 987 n3\n",   # not at a line start
        MARKER + b"4242 n3\n",               # two words
        MARKER + b"42x 987 n3\n",            # no pid
        MARKER + "4242 \u00b2 n3\n".encode(),  # a digit int() does not take
    ])
    def test_other_lines_pass(self, line: bytes) -> None:
        assert (line, None) == _marked(line)

    def test_without_a_marker_the_line_is_the_containers(self) -> None:
        line = MARKER + b"4242 987 n3\n"
        assert line == _through(line)

    def test_text_that_may_become_the_marker_waits_for_its_line(self) -> None:
        filt = LineFilter(MARKER)
        assert b"" == filt.feed(MARKER[:5])
        assert MARKER[:5] + b"?\n" == filt.feed(b"?\n")
        assert b"Password: " == filt.feed(b"Password: ")


class TestRelay:
    def test_copies_to_the_target_fd_and_drains(self) -> None:
        read_out, write_out = os.pipe()

        relay = StderrRelay(write_out)
        step_end = os.dup(relay.write_fd)
        relay.start()
        os.write(step_end, b"one\n" + SRUN_LINE + b"two")
        os.close(step_end)  # the step exits
        relay.drain(5)
        relay.close()
        os.close(write_out)
        with os.fdopen(read_out, "rb") as fh:
            assert b"one\ntwo" == fh.read()

    def test_tail_is_the_end_of_what_passed(self) -> None:
        """`tail` keeps the last TAIL_BYTES passed on, srun's report not among them (exec
        reads the node runtime's last word there)."""
        read_out, write_out = os.pipe()
        relay = StderrRelay(write_out)
        step_end = os.dup(relay.write_fd)
        relay.start()
        os.write(step_end, b"x" * 5000 + b"\nlast words\n" + SRUN_LINE)
        os.close(step_end)
        relay.drain(5)
        relay.close()
        os.close(write_out)
        os.close(read_out)
        assert TAIL_BYTES == len(relay.tail)
        assert relay.tail.endswith(b"x\nlast words\n")

    @pytest.mark.parametrize("started", [False, True])
    def test_close_releases_both_ends(self, started: bool) -> None:
        relay = StderrRelay(os.open(os.devnull, os.O_WRONLY))
        fds = relay.read_fd, relay.write_fd
        if started:
            relay.start()
        relay.close()
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)
