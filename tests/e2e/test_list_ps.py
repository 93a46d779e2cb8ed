"""`list` on the real cluster: two containers, runc's fields plus their Slurm job ids."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Env, leftovers, squeue, wait_status

pytestmark = pytest.mark.e2e


class TestList:
    def test_two_containers(self, env: Env) -> None:
        """A running and a created container are listed with their status, anchor pid,
        bundle and job id, in json, table and quiet form; after delete, neither is."""
        running = env.create("la", env.bundle(["sleep", "60"], name="ba"))
        assert 0 == running.rc, running.stderr()
        created = env.create("lb", env.bundle(["true"], name="bb"))
        assert 0 == created.rc, created.stderr()
        jobs = [running.job_id(), created.job_id()]
        try:
            assert 0 == env.run("start", "la").returncode
            wait_status(env, "la", "running")
            res = env.run("list", "--format", "json")
            assert (0, "") == (res.returncode, res.stderr)
            items = {i["id"]: i for i in json.loads(res.stdout)}
            assert ["la", "lb"] == sorted(items)
            assert ("running", running.pid, jobs[0]) == (
                items["la"]["status"], items["la"]["pid"], items["la"]["slurmJobId"])
            assert ("created", created.pid, jobs[1]) == (
                items["lb"]["status"], items["lb"]["pid"], items["lb"]["slurmJobId"])
            assert str(env.work / "ba") == items["la"]["bundle"]
            assert env.state("la")["created"] == items["la"]["created"]

            table = env.run("list").stdout.splitlines()
            assert table[0].split() == ["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER",
                                        "JOBID"]
            rows = {line.split()[0]: line.split() for line in table[1:]}
            assert ["la", str(running.pid), "running"] == rows["la"][:3]
            assert str(jobs[1]) == rows["lb"][-1]
            assert "la\nlb\n" == env.run("list", "-q").stdout
        finally:
            for cid in ("la", "lb"):
                env.run("delete", "--force", cid)
        assert "null\n" == env.run("list", "--format", "json").stdout
        assert [] == leftovers(env, "la", jobs[:1]) + leftovers(env, "lb", jobs[1:])


class TestPs:
    def test_running_container(self, env: Env) -> None:
        """A running `sleep` container's ps lists its processes on the node (json and
        table); ps of a created or stopped container is runc's `container not running`;
        the helper step leaves nothing behind."""
        created = env.create("pa", env.bundle(["sleep", "60"], name="pa"))
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        try:
            res = env.run("ps", "pa")
            assert (1, "scrun-py: container not running\n") == (res.returncode, res.stderr)
            assert 0 == env.run("start", "pa").returncode
            wait_status(env, "pa", "running")
            res = env.run("ps", "--format", "json", "pa")
            assert (0, "") == (res.returncode, res.stderr), res.stderr
            pids = json.loads(res.stdout)
            assert pids and all(isinstance(p, int) and p > 0 for p in pids)
            table = env.run("ps", "pa").stdout.splitlines()
            assert "PID" == table[0] and len(table) >= 2
            steps = squeue("--steps", "-j", str(job), "-o", "%j", "-h").split()
            assert "scrun-ps" not in steps
        finally:
            env.run("delete", "--force", "pa")
        res = env.run("ps", "pa")
        assert 1 == res.returncode and "does not exist" in res.stderr
        assert [] == leftovers(env, "pa", [job])

    def test_right_after_start(self, env: Env) -> None:
        """ps at once after start (`docker run -d`, then `docker top`): the runtime may
        not have created the container on the node yet, and ps waits until it has."""
        created = env.create("pb", env.bundle(["sleep", "60"], name="pb"))
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        try:
            assert 0 == env.run("start", "pb").returncode
            res = env.run("ps", "--format", "json", "pb")
            assert (0, "") == (res.returncode, res.stderr), res.stderr
            assert json.loads(res.stdout)
        finally:
            env.run("delete", "--force", "pb")
        assert [] == leftovers(env, "pb", [job])
