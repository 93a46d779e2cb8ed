"""The suite's skip rule, for every test under tests/ (unit and end-to-end).

A skipped test checks nothing, so under CI=true every skip is a failure (a skip mark, a
skipif, importorskip, pytest.skip in a test or in a fixture, at collection or at run
time), except the skips on ALLOWED_SKIPS: a test that cannot run on some supported CI
machine, named by its node id and by what its skip says, with the reason.  The terminal
summary counts the skips per reason and lists every skip that is not on the list (those
are the failures under CI=true; without CI=true they stay skips and are only listed).
An expected failure (xfail) is not a skip.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import pytest

#: the section of the terminal summary, and the name of the rule's plugin
TITLE = "skip rule"
CI_SKIP = "unlisted skip under CI=true"
SKIP_PREFIX = "Skipped: "


@dataclass(frozen=True)
class AllowedSkip:
    """A skip that is allowed under CI=true: a test whose node id matches `nodeid` (an
    fnmatch pattern, where "[" opens a character class) skipping with a message in
    which the regex `says` is found."""

    nodeid: str
    says: str
    reason: str

    def matches(self, nodeid: str, message: str) -> bool:
        return (fnmatch.fnmatchcase(nodeid, self.nodeid)
                and re.search(self.says, message) is not None)


NO_PYSLURM = ("a Slurm release without pyslurm (scripts/pyslurm.sh names the releases that "
              "have one): the CLI backend is checked alone; where pyslurm is expected "
              "(SCRUN_TEST_PYSLURM=1) these tests run it and never skip")

ALLOWED_SKIPS: tuple[AllowedSkip, ...] = (
    AllowedSkip(
        "tests/e2e/test_versus_scrun.py::*", r"^Slurm 22\.05 has no scrun of its own",
        "Slurm 22.05 (Debian 12's packaged release) has no scrun of its own (first in "
        "23.02): there is nothing to compare scrun-py with"),
    AllowedSkip(
        "tests/e2e/test_oci_clauses.py::TestNodeLimits::"
        "test_slurm_2205_start_refuses_a_root_path_it_would_not_run*",
        r"^22\.05 only: Slurm \d+\.\d+ runs root\.path",
        "the clause is Slurm 22.05's slurmstepd's (it runs BUNDLE/rootfs whatever root.path "
        "says); from 23.02 slurmstepd runs root.path and `start` has nothing to refuse"),
    AllowedSkip(
        "tests/e2e/test_oci_clauses.py::TestNodeLimits::test_crun_18_refuses_spec_1_3*",
        r"^the node's runtime is crun \d+\.\d+, not crun 1\.8",
        "the clause is about crun 1.8, Debian 12's crun: a machine with another crun "
        "release (Debian 13's) has no crun 1.8 to show it on"),
    AllowedSkip(
        "tests/e2e/test_backend_choice.py::TestSameOnBothBackends::*",
        r"^no pyslurm for Slurm \d+\.\d+", NO_PYSLURM),
    AllowedSkip(
        "tests/e2e/test_backend_contract.py::*", r"^no pyslurm for this cluster: ",
        NO_PYSLURM),
    AllowedSkip(
        "tests/e2e/test_doctor.py::TestConfiglessLoginNode::*", r"^not the site cluster",
        "a cluster of the one-machine layout (Slurm 22.05, which has no sackd, or a "
        "one-node cluster) has no configless login node: these run on the site cluster "
        "(scripts/cluster.sh up --nodes 3 on 23.11 and later)"),
    AllowedSkip(
        "tests/test_releases_conf.py::*::test_the_shared_mirror_matches_releases_conf",
        r"^SCRUN_SLURM_MIRROR is not set$",
        "a machine without a mirror of the Slurm downloads (SCRUN_SLURM_MIRROR is optional: "
        "the releases built from SchedMD's tarballs are then not tested)"),
    AllowedSkip(
        "tests/test_releases_conf.py::*::test_a_tarball_release_is_tested_when_the_mirror_has_it*",
        r"^Slurm \d+\.\d+: not tested here: no slurm-[0-9.]+\.tar\.\w+ in SCRUN_SLURM_MIRROR$",
        "SchedMD's download site cannot be reached from these machines: a release built from "
        "its tarball (scripts/releases.conf) is tested only where SCRUN_SLURM_MIRROR holds it"),
)


def skip_message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """What a skipped report's skip says."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix(SKIP_PREFIX)


def skip_location(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    return f"{longrepr[0]}:{longrepr[1]}" if isinstance(longrepr, tuple) else ""


class SkipRule:
    """The plugin: judges every skipped report, and reports in the terminal summary."""

    def __init__(self, allowed: Sequence[AllowedSkip], ci: bool) -> None:
        self.allowed = tuple(allowed)
        self.ci = ci
        self.counts: Counter[str] = Counter()  # allowed skips per reason
        self.unlisted: list[tuple[str, str]] = []  # (node id, message)

    @classmethod
    def install(cls, config: pytest.Config, allowed: Sequence[AllowedSkip]) -> SkipRule:
        """Register the rule with `allowed`; CI=true in the environment makes it strict."""
        rule = cls(allowed, os.environ.get("CI") == "true")
        config.pluginmanager.register(rule, TITLE)
        return rule

    def reason_for(self, nodeid: str, message: str) -> str | None:
        """The reason of the first entry that allows this skip, None if none does."""
        return next((a.reason for a in self.allowed if a.matches(nodeid, message)), None)

    def judge(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        """Count a skip; an unlisted one becomes a failure under CI=true."""
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        message = skip_message(report)
        reason = self.reason_for(report.nodeid, message)
        if reason is not None:
            self.counts[reason] += 1
            return
        self.unlisted.append((report.nodeid, message))
        if self.ci:
            where = skip_location(report)
            report.outcome = "failed"
            report.longrepr = (f"{CI_SKIP}: {message}\n(the allow-list: ALLOWED_SKIPS in "
                               f"tests/conftest.py{'; skipped at ' + where if where else ''})")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        self.judge(report)
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_make_collect_report(self, collector: pytest.Collector
                                   ) -> Generator[None, pytest.CollectReport,
                                                  pytest.CollectReport]:
        report = yield
        self.judge(report)
        return report

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not (self.counts or self.unlisted or self.ci):
            return
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", TITLE)
        mode = "under CI=true those fail" if self.ci else "without CI=true only listed"
        write(f"skips: {sum(self.counts.values())} allowed, {len(self.unlisted)} not on the "
              f"allow-list ({mode})")
        for reason, count in sorted(self.counts.items()):
            write(f"{count:4d} allowed: {reason}")
        verdict = "FAILED" if self.ci else "UNLISTED"
        for nodeid, message in self.unlisted:
            write(f"{verdict} skip {nodeid}: {message}")


def pytest_configure(config: pytest.Config) -> None:
    SkipRule.install(config, ALLOWED_SKIPS)
