"""Licenses for containers: SCRUN_LICENSES (or the org.scrun-py.licenses annotation)
requests Slurm licenses; a second container waits while they are exhausted."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.e2e.conftest import Env, leftovers, scontrol_job, squeue

pytestmark = pytest.mark.e2e


class TestLicenses:
    def test_second_container_waits_for_the_license(self, user_env: Env) -> None:
        """The first container's job holds scrunlic:1 (the cluster has one); a second
        container asking for it by annotation stays pending in create and gets its job
        once the first is deleted."""
        env = user_env
        first = env.create("lic1", env.bundle(["sleep", "300"], name="b1",
                                              env=["SCRUN_LICENSES=scrunlic:1"]))
        assert 0 == first.rc, first.stderr()
        job1 = first.job_id()
        assert "scrunlic:1" == scontrol_job(job1)["Licenses"]
        second_bundle = env.bundle(["echo", "second"], name="b2",
                                   annotations={"org.scrun-py.licenses": "scrunlic:1"})
        out = env.work / "lic2.out"
        with open(out, "wb") as fo:
            pending = subprocess.Popen(
                env.cmd("create", "--bundle", str(second_bundle.path), "--pid-file",
                        str(env.work / "lic2.pid"), "lic2"),
                env=env.user.env(), stdin=subprocess.DEVNULL, stdout=fo, stderr=fo)
            try:
                deadline = time.monotonic() + 30
                while "Licenses" not in squeue("-u", env.user.name, "-t", "PD", "-o", "%r"):
                    assert time.monotonic() < deadline, "second job never pending on licenses"
                    assert pending.poll() is None, out.read_text()
                    time.sleep(0.2)
                assert None is pending.poll()  # create blocks while the job is pending
                assert 0 == env.run("delete", "--force", "lic1").returncode
                assert 0 == pending.wait(timeout=60), out.read_text()
            finally:
                if pending.poll() is None:
                    pending.kill()
        env.anchors.append(int((env.work / "lic2.pid").read_text()))
        assert "created" == env.state("lic2")["status"]
        assert 0 == env.run("delete", "lic2").returncode
        assert [] == leftovers(env, "lic1", [job1])
        assert [] == leftovers(env, "lic2")
