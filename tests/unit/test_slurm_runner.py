"""slurm/runner.py: the one runner of Slurm's short commands."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os

import pytest

from scrun_py.base.errors import SlurmError
from scrun_py.slurm import runner


class TestRunner:
    def test_checked(self) -> None:
        """A command that ran is its Result, whatever its status; one that could not
        start or timed out is a SlurmError."""
        assert 3 == runner.checked(["sh", "-c", "exit 3"]).status
        with pytest.raises(SlurmError, match="cannot run /nonexistent/squeue"):
            runner.checked(["/nonexistent/squeue"])
        with pytest.raises(SlurmError, match=r"sleep timed out after 0\.2s"):
            runner.checked(["sleep", "10"], timeout_s=0.2)

    def test_stdout_of(self) -> None:
        """stdout alone of a command that succeeded; None otherwise."""
        env = dict(os.environ)
        assert "out\n" == runner.stdout_of(["sh", "-c", "echo out; echo err >&2"], env, 10)
        assert runner.stdout_of(["sh", "-c", "echo out; exit 1"], env, 10) is None
        assert runner.stdout_of(["/nonexistent/squeue"], env, 10) is None
        assert runner.stdout_of(["sleep", "10"], env, 0.2) is None
