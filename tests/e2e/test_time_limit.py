"""The job's time limit reached while the container runs (SCRUN_TIMELIMIT=1: Slurm ends
the job after 60-90 s)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Env, leftovers, scontrol_job, traces

pytestmark = pytest.mark.e2e


class TestTimeLimit:
    @pytest.mark.case("F-06")
    def test_time_limit_reached(self, user_env: Env) -> None:
        """A container still running near its job's time limit is stopped by scrun-py
        through the runtime (TERM, its trap runs) before Slurm's own kill, which on 22.05
        cannot tear a container step down: the job ends FAILED with the trap's code,
        state says stopped, nothing is left."""
        env = user_env
        bundle = env.bundle(["sh", "-c", "trap 'echo term; exit 7' TERM; echo started; "
                             "while :; do sleep 1; done"],
                            env=["SCRUN_TIMELIMIT=1"])
        created = env.create("tl", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert "00:01:00" == scontrol_job(job)["TimeLimit"]
        assert 0 == env.run("start", "tl").returncode
        t0 = time.monotonic()
        rc = created.wait_exit(timeout=150)
        assert 7 == rc, (created.stderr(), env.log_records(), scontrol_job(job))
        assert 30 < time.monotonic() - t0 < 60
        assert "started\nterm\n" == created.stdout()
        assert "stopped" == env.state("tl")["status"]
        fields = scontrol_job(job)
        assert ("FAILED", "7:0") == (fields["JobState"], fields["ExitCode"])
        assert 0 == env.run("delete", "tl").returncode
        assert [] == leftovers(env, "tl", [job])
        assert [] == traces(env, "tl")

    @pytest.mark.case("F-08")
    def test_time_limit_container_ignores_term(self, user_env: Env) -> None:
        """A container that ignores TERM gets KILL through the runtime before Slurm's own
        time-limit kill: exit 137, job FAILED, and the node stays in service."""
        env = user_env
        bundle = env.bundle(["sh", "-c", "trap '' TERM; echo started; "
                             "while :; do sleep 1; done"], env=["SCRUN_TIMELIMIT=1"])
        created = env.create("tk", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", "tk").returncode
        assert 137 == created.wait_exit(timeout=150)
        assert "FAILED" == scontrol_job(job)["JobState"]
        assert 0 == env.run("delete", "tk").returncode
        assert [] == leftovers(env, "tk", [job])

    @pytest.mark.case("F-07")
    def test_stage_in_hangs(self, user_env: Env, conf_dir: Path) -> None:
        """A stage_in that never returns is bounded by the job's time limit: create fails
        with a clear error before the limit, the hook's commands are killed, nothing is
        left."""
        env = user_env
        (conf_dir / "scrun.lua").write_text(
            "function slurm_scrun_stage_in(...) os.execute('sleep 600'); return 0 end\n"
            "function slurm_scrun_stage_out(...) return 0 end\n"
            "return slurm.SUCCESS\n")
        bundle = env.bundle(["true"], env=["SCRUN_TIMELIMIT=1"])
        t0 = time.monotonic()
        created = env.create("hang", bundle, conf=conf_dir / "slurm.conf", timeout=170)
        elapsed = time.monotonic() - t0
        assert 0 != created.rc
        assert elapsed < 90
        lines = [ln for ln in created.stderr().splitlines() if ln.strip()]
        assert 1 == len(lines), created.stderr()
        assert "time limit" in lines[0]
        assert [] == leftovers(env, "hang")
        hung = subprocess.run(["pgrep", "-u", env.user.name, "-f", "sleep 600"],
                              capture_output=True, text=True).stdout.split()
        assert [] == hung
