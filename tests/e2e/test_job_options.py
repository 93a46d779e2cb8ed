"""SCRUN_* variables reach the job and the step; the job is named after its container
and carries its id; SLURM_JOB_ID reuses a job."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    Env,
    leftovers,
    scontrol_job,
    slurm_env,
    slurm_release,
    squeue,
    wait_until,
)

pytestmark = pytest.mark.e2e


class TestJobOptions:
    def test_scrun_variables_from_config_env(self, env: Env) -> None:
        """SCRUN_JOB_NAME names the job; SCRUN_TIMELIMIT and SCRUN_PARTITION set the
        job's limits; the srun-only SCRUN_LABELIO is applied to the step (labelled output)."""
        bundle = env.bundle(["sh", "-c", "echo labelled"], env=[
            "SCRUN_JOB_NAME=mine", "SCRUN_TIMELIMIT=7", "SCRUN_PARTITION=other",
            "SCRUN_LABELIO=1", "UNRELATED=1"])
        created = env.create("opts", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        fields = scontrol_job(job)
        assert "mine" == fields["JobName"]
        assert "00:07:00" == fields["TimeLimit"]
        assert "other" == fields["Partition"]
        assert 0 == env.run("start", "opts").returncode
        assert 0 == created.wait_exit()
        assert "0: labelled\n" == created.stdout()
        assert 0 == env.run("delete", "opts").returncode
        assert [] == leftovers(env, "opts", [job])

    def test_job_named_after_its_container(self, user_env: Env) -> None:
        """Without SCRUN_JOB_NAME the job is named after the container, so the user's
        `squeue --me` tells two containers apart; on a Slurm with a job container id
        (23.02 and later) `squeue -O ContainerId` shows the id too, as for Slurm's scrun.
        A SCRUN_JOB_NAME Slurm would refuse (a newline) leaves that name and a warning
        in --log.  The container's step keeps Slurm's name, `scrun`."""
        env = user_env
        bundle = env.bundle(["sh", "-c", "echo ran; sleep 60"])
        bad = env.bundle(["true"], name="bad", env=["SCRUN_JOB_NAME=two\nlines"])
        first, second = env.create("first-c", bundle), env.create("second-c", bad)
        assert (0, 0) == (first.rc, second.rc), first.stderr() + second.stderr()
        jobs = {first.job_id(): "first-c", second.job_id(): "second-c"}
        res = subprocess.run(env.user.argv(["squeue", "--me", "-h", "-o", "%i %j"]),
                             env=env.user.env(), capture_output=True, text=True, timeout=30)
        shown = dict(line.split(" ", 1) for line in res.stdout.splitlines())
        assert {str(j): name for j, name in jobs.items()} == shown
        if slurm_release() >= (23, 2):
            for job, cid in jobs.items():
                assert cid == squeue("-j", str(job), "-O", "ContainerId").strip()
        [warning] = [r for r in env.log_records() if r.get("variable") == "SCRUN_JOB_NAME"]
        assert ("warning", "second-c") == (warning["level"], warning["container_id"])
        assert "named after the container" in str(warning["msg"])
        assert 0 == env.run("start", "first-c").returncode
        wait_until(lambda: "ran\n" == first.stdout(), "the container's output")
        steps = squeue("--steps", "-j", str(first.job_id()), "-o", "%j").split()
        assert "scrun" in steps, steps
        assert "first-c" not in steps, steps
        for cid in ("first-c", "second-c"):
            assert 0 == env.run("delete", "--force", cid).returncode
        assert [] == leftovers(env, "first-c", list(jobs))

    def test_scrun_variables_from_caller_environment(self, env: Env) -> None:
        """SCRUN_* variables in the environment of `create` (e.g. podman --env-host) apply."""
        bundle = env.bundle(["true"])
        created = env.create("callerenv", bundle,
                             env=env.user.env(SCRUN_TIMELIMIT="3", SCRUN_WORKING_DIR="/tmp"))
        assert 0 == created.rc, created.stderr()
        fields = scontrol_job(created.job_id())
        assert "00:03:00" == fields["TimeLimit"]
        # the job's working directory (salloc's --chdir alone moves only its command)
        assert "/tmp" == fields["WorkDir"]
        assert 0 == env.run("delete", "callerenv").returncode

    def test_job_environment_reaches_the_container(self, env: Env) -> None:
        """The container sees SLURM_JOB_ID of its job (Slurm merges the step env)."""
        bundle = env.bundle(["sh", "-c", "echo $SLURM_JOB_ID"])
        created = env.create("jobenv", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", "jobenv").returncode
        assert 0 == created.wait_exit()
        assert f"{job}\n" == created.stdout()
        assert 0 == env.run("delete", "jobenv").returncode


class TestExistingAllocation:
    def test_slurm_job_id_reuses_the_job(self, user_env: Env, conf_dir: Path) -> None:
        """With SLURM_JOB_ID set (config.json may set it where the site's [trust]
        container_env allows it) the container runs in that job, no second job is made,
        and the job is still running after the container is deleted."""
        env = user_env
        (conf_dir / "scrun-py.toml").write_text('[trust]\ncontainer_env = ["SLURM_JOB_ID"]\n')
        conf = conf_dir / "slurm.conf"
        holder = subprocess.Popen(
            env.user.argv(["salloc", "--no-shell", "--job-name=outer", "--time=5"]),
            env=env.user.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = holder.communicate(timeout=60)
        outer = int(err.split("Granted job allocation")[1].split()[0])
        try:
            before = squeue("-u", env.user.name, "-o", "%i").split()
            bundle = env.bundle(["sh", "-c", "echo $SLURM_JOB_ID"], env=[f"SLURM_JOB_ID={outer}"])
            created = env.create("reuse", bundle, conf=conf)
            assert 0 == created.rc, created.stderr()
            assert outer == created.job_id()
            assert before == squeue("-u", env.user.name, "-o", "%i").split()
            assert 0 == env.run("start", "reuse", conf=conf).returncode
            assert 0 == created.wait_exit()
            assert f"{outer}\n" == created.stdout()
            assert 0 == env.run("delete", "reuse", conf=conf).returncode
            time.sleep(0.2)
            assert "RUNNING" == squeue("-j", str(outer), "-o", "%T").strip()
            assert [] == leftovers(env, "reuse")
        finally:
            subprocess.run(["scancel", str(outer)], env=slurm_env(), check=False)
