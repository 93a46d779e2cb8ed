"""SCRUN_* variables that are read but not applied are never dropped silently (issue 13.7)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from scrun_py.slurm.options import IGNORED, job_options


class TestIgnoredJobOptions:
    @pytest.mark.parametrize("name", ["SCRUN_JOB_NAME", "SCRUN_POWER"])
    def test_warns_naming_variable_and_reason(self, name: str) -> None:
        """One warning names the ignored variable and says why; no salloc/srun option."""
        with capture_logs() as records:
            opts = job_options({name: "value", "SCRUN_PARTITION": "debug"})
        assert ["--partition=debug"] == opts.alloc
        assert [] == [o for o in opts.alloc + opts.step if "job-name" in o or "power" in o]
        warnings = [r for r in records if r["log_level"] == "warning"]
        assert 1 == len(warnings)
        assert name == warnings[0]["variable"]
        assert f"{name} is ignored: {IGNORED[name]}" == warnings[0]["event"]

    def test_no_warning_for_applied_options(self) -> None:
        """Applied variables log nothing."""
        with capture_logs() as records:
            job_options({"SCRUN_PARTITION": "debug", "SCRUN_TIMELIMIT": "5"})
        assert [] == records
