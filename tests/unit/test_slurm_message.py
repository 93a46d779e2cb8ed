"""How a failed salloc's stderr becomes the one-line error create reports."""

from __future__ import annotations

from scrun_py.slurm.parse import slurm_message as _slurm_message


class TestSlurmMessage:
    def test_single_error_line_is_kept(self) -> None:
        """One error line is the message, as Slurm wrote it."""
        lines = ["salloc: error: Job submit/allocate failed: Invalid partition name specified"]
        assert lines[0] == _slurm_message(lines)

    def test_required_spank_plugin_failure_names_the_plugin(self) -> None:
        """The cause lines before Slurm's generic summary are kept, in order, on one line."""
        lines = ["salloc: Granted job allocation 7",
                 "salloc: Relinquishing job allocation 7",
                 "salloc: error: gate: allocation refused",
                 "salloc: error: spank: required plugin gate.so: init_post_opt() failed "
                 "with rc=-1",
                 "salloc: error: Plugin stack post-option processing failed"]
        assert ("salloc: error: gate: allocation refused; spank: required plugin gate.so: "
                "init_post_opt() failed with rc=-1; Plugin stack post-option processing "
                "failed") == _slurm_message(lines)

    def test_only_the_last_three_distinct_error_lines(self) -> None:
        """Repeated and older error lines are dropped."""
        lines = [f"salloc: error: e{i}" for i in range(5)] + ["salloc: error: e4"]
        assert "salloc: error: e2; e3; e4" == _slurm_message(lines)

    def test_no_error_line_gives_the_last_useful_line(self) -> None:
        assert "salloc: something odd" == _slurm_message(
            ["salloc: Granted job allocation 7", "salloc: something odd", ""])
        assert "no output" == _slurm_message([])
