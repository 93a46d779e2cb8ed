"""SCRUN_* variables reach the job and the step; SLURM_JOB_ID reuses a job."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Env, leftovers, scontrol_job, slurm_env, squeue

pytestmark = pytest.mark.e2e


class TestJobOptions:
    def test_scrun_variables_from_config_env(self, env: Env) -> None:
        """SCRUN_JOB_NAME is overridden to scrun; SCRUN_TIMELIMIT and SCRUN_PARTITION set the
        job's limits; the srun-only SCRUN_LABELIO is applied to the step (labelled output)."""
        bundle = env.bundle(["sh", "-c", "echo labelled"], env=[
            "SCRUN_JOB_NAME=mine", "SCRUN_TIMELIMIT=7", "SCRUN_PARTITION=other",
            "SCRUN_LABELIO=1", "UNRELATED=1"])
        created = env.create("opts", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        fields = scontrol_job(job)
        assert "scrun" == fields["JobName"]
        assert "00:07:00" == fields["TimeLimit"]
        assert "other" == fields["Partition"]
        assert 0 == env.run("start", "opts").returncode
        assert 0 == created.wait_exit()
        assert "0: labelled\n" == created.stdout()
        assert 0 == env.run("delete", "opts").returncode
        assert [] == leftovers(env, "opts", [job])

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
