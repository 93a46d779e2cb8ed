"""scripts/leftovers.sh, the check at the end of scripts/test.sh: the processes a test run
started that still run.  A process leaked here on purpose (with the run's marker in its
environment, or in a directory standing for the run's cgroup) must be found, and fail the
check under CI=true.  No cluster is needed."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "leftovers.sh"
NONE = "[leftovers] no process of this test run is left\n"


def _check(run: str, *args: str, ci: bool, cgroup: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "SCRUN_PY_TEST_RUN", "SCRUN_PY_TEST_CGROUP")}
    env["SCRUN_PY_TEST_RUN"] = run
    if ci:
        env["CI"] = "true"
    if cgroup is not None:
        env["SCRUN_PY_TEST_CGROUP"] = str(cgroup)
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _leak(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process left running, in a session of its own, as a daemon would be."""
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


@pytest.fixture
def run() -> str:
    return f"leftovers-test-{uuid.uuid4()}"


@pytest.fixture
def leaked(run: str) -> Iterator[subprocess.Popen[bytes]]:
    """A process with the run's marker in its environment; ended (and reaped) after."""
    proc = _leak({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SCRUN_PY_TEST_RUN": run})
    yield proc
    proc.kill()
    proc.wait(timeout=30)


class TestLeftovers:
    def test_nothing_left_passes(self, run: str) -> None:
        """A run that left nothing: one line says so, exit 0 even under CI=true."""
        res = _check(run, ci=True)
        assert (0, NONE) == (res.returncode, res.stderr), res.stderr

    def test_leak_fails_under_ci(self, run: str, leaked: subprocess.Popen[bytes]) -> None:
        """A process with the run's marker is listed (by pid, with its session) and fails
        the check under CI=true."""
        res = _check(run, ci=True)
        assert 1 == res.returncode, res.stderr
        assert str(leaked.pid) in res.stderr.split(), res.stderr
        assert "sleep 300" in res.stderr
        assert leaked.poll() is None, "the check alone ends nothing"

    def test_leak_is_a_warning_without_ci(self, run: str,
                                          leaked: subprocess.Popen[bytes]) -> None:
        res = _check(run, ci=False)
        assert 0 == res.returncode, res.stderr
        assert str(leaked.pid) in res.stderr.split(), res.stderr
        assert "warning" in res.stderr

    def test_other_runs_are_not_listed(self, leaked: subprocess.Popen[bytes]) -> None:
        """Only this run's marker counts: a process of another run is not listed."""
        res = _check(f"leftovers-test-{uuid.uuid4()}", ci=True)
        assert (0, NONE) == (res.returncode, res.stderr), res.stderr

    def test_kill_ends_the_leak(self, run: str, leaked: subprocess.Popen[bytes]) -> None:
        """--kill lists the process, ends it, and still fails under CI=true."""
        res = _check(run, "--kill", ci=True)
        assert 1 == res.returncode, res.stderr
        assert str(leaked.pid) in res.stderr.split(), res.stderr
        assert -15 == leaked.wait(timeout=30)
        assert 0 == _check(run, ci=True).returncode

    def test_cgroup_member_without_marker(self, run: str, tmp_path: Path) -> None:
        """A process in the run's cgroup (here a directory with its cgroup.procs, one
        level down) is listed though its environment has no marker (`env -i`)."""
        proc = _leak({"PATH": "/usr/bin:/bin"})
        try:
            sub = tmp_path / "cg" / "child"
            sub.mkdir(parents=True)
            (tmp_path / "cg" / "cgroup.procs").write_text("")
            (sub / "cgroup.procs").write_text(f"{proc.pid}\n")
            res = _check(run, ci=True, cgroup=tmp_path / "cg")
            assert 1 == res.returncode, res.stderr
            assert str(proc.pid) in res.stderr.split(), res.stderr
            assert 0 == _check(run, ci=True).returncode, "without the cgroup it is not found"
        finally:
            proc.kill()
            proc.wait(timeout=30)

    def test_the_check_and_its_ancestors_are_not_leftovers(self, run: str) -> None:
        """The check runs inside the run (test.sh is its parent, with the marker): the
        caller and the commands the check runs are not listed."""
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "SCRUN_PY_TEST_CGROUP")}
        env.update(SCRUN_PY_TEST_RUN=run, CI="true")
        res = subprocess.run(["bash", "-c", f"{SCRIPT}; echo rc=$?"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert ("rc=0\n", NONE) == (res.stdout, res.stderr)

    def test_no_marker_is_a_usage_error(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "SCRUN_PY_TEST_RUN"}
        res = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True,
                             timeout=60)
        assert 2 == res.returncode
        assert "SCRUN_PY_TEST_RUN" in res.stderr
