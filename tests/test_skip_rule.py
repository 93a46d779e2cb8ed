"""The suite's skip rule (tests/conftest.py), run on small test files with pytester: under
CI=true a skip that is not on the allow-list fails the run and a listed one passes, its
reason counted in the terminal summary; without CI=true skips are only reported."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ALLOWED_SKIPS, AllowedSkip

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
LISTED_REASON = "the moon is not up on every CI machine"
# the rule with a one-entry allow-list, installed as the suite's conftest installs it
CONFTEST = f"""
from tests.conftest import AllowedSkip, SkipRule

ALLOWED = [AllowedSkip("test_listed.py::*", r"^no moon tonight", {LISTED_REASON!r})]


def pytest_configure(config):
    SkipRule.install(config, ALLOWED)
"""
LISTED = """
import pytest

def test_listed():
    pytest.skip("no moon tonight")
"""
# every way a test gets skipped: in the test, by marks, in a fixture, by importorskip
UNLISTED = """
import pytest

@pytest.fixture
def needs_sun():
    pytest.skip("no sun in the fixture")

def test_in_the_test():
    pytest.skip("no sun tonight")

@pytest.mark.skip(reason="marked")
def test_mark():
    pass

@pytest.mark.skipif(True, reason="skipif says so")
def test_skipif():
    pass

def test_fixture(needs_sun):
    pass

def test_importorskip():
    pytest.importorskip("no_such_module_anywhere")

def test_listed_message_elsewhere():
    pytest.skip("no moon tonight")

@pytest.mark.xfail(reason="an expected failure is not a skip")
def test_xfail():
    assert False

def test_passes():
    pass
"""
UNLISTED_TESTS = ("test_in_the_test", "test_mark", "test_skipif", "test_fixture",
                  "test_importorskip", "test_listed_message_elsewhere")
MODULE_SKIP = """
import pytest

pytest.importorskip("no_such_module_anywhere")

def test_never_collected():
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_listed=LISTED, test_unlisted=UNLISTED)
    return pytester


def _summary(result: pytest.RunResult) -> list[str]:
    """The lines of the rule's section of the terminal summary."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if re.match(r"^=+ skip rule =+$", line))
    end = next((i for i, line in enumerate(lines) if i > start and line.startswith("=")),
               len(lines))
    return lines[start + 1:end]


class TestUnderCi:
    def test_unlisted_skips_fail_listed_one_passes(self, project: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        """Every unlisted skip fails (at setup: an error), the listed skip stays a skip,
        and the summary counts it under its reason and names each failure."""
        monkeypatch.setenv("CI", "true")
        result = project.runpytest("-p", "no:cacheprovider", "-rA")
        assert 1 == result.ret
        # a skip at setup (a mark, a fixture) becomes an error, one in the test a failure
        result.assert_outcomes(passed=1, skipped=1, failed=3, errors=3, xfailed=1)
        result.stdout.fnmatch_lines([
            "*ERROR at setup of test_fixture*",
            "unlisted skip under CI=true: no sun in the fixture",
            "(the allow-list: ALLOWED_SKIPS in tests/conftest.py; skipped at *test_unlisted.py:*)",
            "*_ test_in_the_test _*",
            "unlisted skip under CI=true: no sun tonight",
            "*FAILED test_unlisted.py::test_in_the_test - unlisted skip under CI=true: no sun*",
        ])
        summary = _summary(result)
        assert [
            "skips: 1 allowed, 6 not on the allow-list (under CI=true those fail)",
            f"   1 allowed: {LISTED_REASON}",
        ] == summary[:2]
        assert sorted(f"FAILED skip test_unlisted.py::{name}" for name in UNLISTED_TESTS) == (
            sorted(line.partition(": ")[0] for line in summary[2:]))

    def test_only_listed_skips_pass(self, pytester: pytest.Pytester,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
        """A run whose only skip is listed passes, with the reason counted."""
        monkeypatch.setenv("CI", "true")
        pytester.makeconftest(CONFTEST)
        pytester.makepyfile(test_listed=LISTED)
        result = pytester.runpytest("-p", "no:cacheprovider")
        assert 0 == result.ret
        result.assert_outcomes(skipped=1)
        assert ["skips: 1 allowed, 0 not on the allow-list (under CI=true those fail)",
                f"   1 allowed: {LISTED_REASON}"] == _summary(result)

    def test_no_skip_is_reported_too(self, pytester: pytest.Pytester,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
        """Under CI=true the summary says so even when nothing was skipped."""
        monkeypatch.setenv("CI", "true")
        pytester.makeconftest(CONFTEST)
        pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
        result = pytester.runpytest("-p", "no:cacheprovider")
        assert 0 == result.ret
        assert ["skips: 0 allowed, 0 not on the allow-list (under CI=true those "
                "fail)"] == _summary(result)

    def test_module_level_skip_fails_collection(self, pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
        """A module skipped as a whole (importorskip at import) is a collection error."""
        monkeypatch.setenv("CI", "true")
        pytester.makeconftest(CONFTEST)
        pytester.makepyfile(test_module=MODULE_SKIP)
        result = pytester.runpytest("-p", "no:cacheprovider")
        assert pytest.ExitCode.INTERRUPTED == result.ret
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["unlisted skip under CI=true: could not import "
                                     "'no_such_module_anywhere'*"])
        assert "FAILED skip test_module.py: could not import" in "\n".join(_summary(result))


class TestWithoutCi:
    @pytest.mark.parametrize("ci", ["", "false", None])
    def test_skips_are_only_reported(self, project: pytest.Pytester,
                                     monkeypatch: pytest.MonkeyPatch, ci: str | None) -> None:
        """Without CI=true every skip stays a skip; the summary still counts the listed
        one under its reason and lists the unlisted ones."""
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        result = project.runpytest("-p", "no:cacheprovider")
        assert 0 == result.ret
        result.assert_outcomes(passed=1, skipped=7, xfailed=1)
        summary = _summary(result)
        assert [
            "skips: 1 allowed, 6 not on the allow-list (without CI=true only listed)",
            f"   1 allowed: {LISTED_REASON}",
        ] == summary[:2]
        assert sorted(f"UNLISTED skip test_unlisted.py::{name}" for name in UNLISTED_TESTS) == (
            sorted(line.partition(": ")[0] for line in summary[2:]))


class TestAllowList:
    def test_entries_name_tests_that_exist(self) -> None:
        """Each entry names an existing test file, a regex that compiles and a reason."""
        for entry in ALLOWED_SKIPS:
            path = entry.nodeid.partition("::")[0]
            assert (REPO / path).is_file(), entry
            re.compile(entry.says)
            assert entry.reason.strip(), entry

    @pytest.mark.parametrize(("nodeid", "message", "allowed"), [
        ("tests/e2e/test_versus_scrun.py::TestLifecycle::test_exit_0[user]",
         "Slurm 22.05 has no scrun of its own (first in 23.02)", True),
        ("tests/e2e/test_versus_scrun.py::TestEngines::test_run[docker]",
         "dockerd is not installed (scripts/cluster.sh up installs it)", False),
        ("tests/e2e/test_versus_scrun.py::TestLifecycle::test_exit_0[user]",
         "Slurm 26.05 is installed without its scrun (/opt/slurm/26.05/bin/scrun)", False),
        ("tests/e2e/test_oci_clauses.py::TestNodeLimits::test_crun_18_refuses_spec_1_3[user]",
         "the node's runtime is crun 1.21, not crun 1.8", True),
        ("tests/e2e/test_oci_clauses.py::TestNodeLimits::test_crun_18_refuses_spec_1_3[user]",
         "the cluster's oci.conf does not run crun, or crun is not installed", False),
        ("tests/e2e/test_lifecycle.py::TestRun::test_exit[user]",
         "no local cluster (/var/lib/scrun-py-test/slurm.conf missing)", False),
        ("tests/unit/test_lua_hooks.py::TestJson::test_crun_spec_round_trip",
         "crun is not installed", False),
    ])
    def test_what_the_list_allows(self, nodeid: str, message: str, allowed: bool) -> None:
        """A listed test skipping for its listed reason is allowed; the same test skipping
        for another reason, or another test, is not."""
        assert allowed is any(a.matches(nodeid, message) for a in ALLOWED_SKIPS)

    def test_matches_node_id_and_message(self) -> None:
        entry = AllowedSkip("tests/a.py::*", r"^needs x$", "x is optional")
        assert (True, False, False) == (entry.matches("tests/a.py::test_1[p]", "needs x"),
                                        entry.matches("tests/b.py::test_1", "needs x"),
                                        entry.matches("tests/a.py::test_1", "needs y"))
