"""SCRUN_* variables that are read but not applied are never dropped silently."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import pytest

from scrun_py.slurm.options import IGNORED, ignored_warning, job_options


class TestIgnoredJobOptions:
    @pytest.mark.parametrize(("name", "value"), [("SCRUN_JOB_NAME", "a\nb"),
                                                 ("SCRUN_POWER", "value")])
    def test_warns_naming_variable_and_reason(self, name: str, value: str) -> None:
        """The ignored variable is reported (the anchor logs one warning for it, naming it
        and saying why); no salloc/srun option.  SCRUN_JOB_NAME is ignored only when Slurm
        would refuse the name (a control character here)."""
        opts = job_options({name: value, "SCRUN_PARTITION": "debug"})
        assert ["--partition=debug"] == opts.alloc
        assert [] == [o for o in opts.alloc + opts.step if "job-name" in o or "power" in o]
        assert [name] == opts.ignored
        assert f"{name} is ignored: {IGNORED[name]}" == ignored_warning(name)

    def test_no_warning_for_applied_options(self) -> None:
        """Applied variables are not reported."""
        assert [] == job_options({"SCRUN_PARTITION": "debug", "SCRUN_TIMELIMIT": "5"}).ignored
