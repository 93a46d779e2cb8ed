"""Bad input fails `create` (or the verb) with one clear line, an error record in --log,
a non-zero exit, and nothing left: no job, anchor, socket, spool dir or pid file."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scrun_py.slurm import release_memo
from tests.e2e.conftest import (
    Env,
    anchor_processes,
    leftovers,
    run_in_work,
    squeue,
    traces,
)

pytestmark = pytest.mark.e2e


def _assert_clean_failure(env: Env, created_rc: int, stderr: str, cid: str,
                          needle: str) -> None:
    assert 0 != created_rc
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert 1 == len(lines), stderr
    assert needle in lines[0]
    errors = env.errors()
    assert errors, "no error record in --log"
    assert needle in str(errors[-1]["msg"])
    assert {"level", "msg", "time"} <= set(errors[-1])
    assert not (env.root / cid).exists()
    # only this test's jobs: other sessions may run jobs as the same user meanwhile
    assert [] == traces(env, cid)


def _jobs_from_work(env: Env) -> list[str]:
    """Ids of the jobs, in any state, that a command run from this test's work dir made
    (WorkDir == env.work: other sessions may run jobs as the same user meanwhile)."""
    rows = [line.split("|") for line in squeue("-u", env.user.name, "-t", "all",
                                               "-o", "%i|%Z").splitlines()]
    return sorted(r[0] for r in rows if len(r) == 2 and r[1] == str(env.work))


class TestBadCreate:
    @pytest.mark.case("BI-01")
    def test_missing_bundle(self, env: Env) -> None:
        """A bundle directory that does not exist."""
        res = run_in_work(env, "create", "--bundle", str(env.work / "nope"), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "not a directory")

    @pytest.mark.case("BI-04")
    def test_broken_config_json(self, env: Env) -> None:
        """config.json that is not JSON."""
        bundle = env.bundle(["true"])
        bundle.config_file.write_text("{ not json")
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "not valid JSON")

    @pytest.mark.case("BI-06")
    def test_args_not_a_list(self, env: Env) -> None:
        """process.args of the wrong type names the field."""
        bundle = env.bundle(["true"])
        cfg = bundle.config()
        cfg["process"]["args"] = "echo hi"  # type: ignore[index]
        bundle.config_file.write_text(json.dumps(cfg))
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "process.args")

    @pytest.mark.case("BI-13")
    def test_bad_oci_conf(self, env: Env, conf_dir: Path) -> None:
        """An unknown oci.conf key fails create with the key named."""
        (conf_dir / "oci.conf").write_text((conf_dir / "oci.conf").read_text()
                                           + "NoSuchKey=1\n")
        bundle = env.bundle(["true"])
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "c",
                          conf=conf_dir / "slurm.conf")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "NoSuchKey")

    @pytest.mark.case("BI-21")
    def test_unknown_partition(self, env: Env) -> None:
        """An allocation Slurm refuses fails create with Slurm's reason (Slurm's scrun
        exits 0 here) and leaves no job."""
        bundle = env.bundle(["true"], env=["SCRUN_PARTITION=nosuchpart"])
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "partition")

    @pytest.mark.case("BI-20")
    def test_bad_time_limit(self, env: Env) -> None:
        """An invalid SCRUN_TIMELIMIT is rejected by salloc and reported."""
        bundle = env.bundle(["true"], env=["SCRUN_TIMELIMIT=soon"])
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "time")

    def test_twenty_failed_allocations_at_once_leave_nothing(self, env: Env) -> None:
        """20 creates whose allocation fails, at once, from one --root with no memo of
        srun's release yet: each fails with salloc's reason, and the --root holds
        nothing but the memo afterwards (no temporary file of it, no spool entry)."""
        (env.root / release_memo.MEMO_NAME).unlink(missing_ok=True)
        bundle = env.bundle(["true"], env=["SCRUN_TIMELIMIT=soon"])

        def create(i: int) -> subprocess.CompletedProcess[str]:
            return run_in_work(env, "create", "--bundle", str(bundle.path), f"c{i}",
                               log=False)

        with ThreadPoolExecutor(max_workers=20) as pool:
            results = list(pool.map(create, range(20)))
        for res in results:
            assert 0 != res.returncode
            assert "time" in res.stderr, res.stderr
        left = sorted(p.name for p in env.root.iterdir())
        assert left in ([], [release_memo.MEMO_NAME]), left
        assert [] == traces(env)

    @pytest.mark.case("F-05")
    def test_stage_in_failure(self, env: Env, conf_dir: Path) -> None:
        """stage_in returning -1 fails create, ends the job and leaves nothing."""
        (conf_dir / "scrun.lua").write_text(
            "function slurm_scrun_stage_in(id, bundle, spool, cfg, job, uid, gid, env)\n"
            "  return -1\nend\n"
            "function slurm_scrun_stage_out(...) return 0 end\n"
            "return slurm.SUCCESS\n")
        bundle = env.bundle(["true"])
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "c",
                          conf=conf_dir / "slurm.conf")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "scrun.lua")

    @pytest.mark.case("BI-17")
    def test_lua_syntax_error(self, env: Env, conf_dir: Path) -> None:
        """A scrun.lua that does not load fails create before any allocation."""
        (conf_dir / "scrun.lua").write_text("function slurm_scrun_stage_in(\n")
        bundle = env.bundle(["true"])
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "c",
                          conf=conf_dir / "slurm.conf")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "scrun.lua")

    @pytest.mark.case("BI-28")
    def test_duplicate_id(self, env: Env) -> None:
        """A second create with the same id fails with runc's message and makes no job of
        its own; the first survives (its record, its anchor, its one job), and once it is
        deleted nothing is left."""
        bundle = env.bundle(["true"])
        first = env.create("dup", bundle)
        assert 0 == first.rc, first.stderr()
        job = first.job_id()
        record = (env.root / "dup" / "state.json").read_bytes()
        jobs = _jobs_from_work(env)
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "dup")
        assert 0 != res.returncode
        assert "container with given ID already exists" in res.stderr
        assert "created" == env.state("dup")["status"]
        assert record == (env.root / "dup" / "state.json").read_bytes()
        # the first container's anchor and its pid (the namespace holder), nothing more
        assert sorted([json.loads(record)["anchor_pid"], first.pid]) == sorted(
            anchor_processes(env))
        assert jobs == _jobs_from_work(env)
        assert "RUNNING" == squeue("-j", str(job), "-o", "%T").strip()
        assert 0 == run_in_work(env, "delete", "dup").returncode
        first.wait_exit()
        assert [] == traces(env, "dup")
        assert [] == leftovers(env, "dup", [job])

    @pytest.mark.parametrize("bad_id", [
        pytest.param("a/b", marks=pytest.mark.case("BI-29")),
        pytest.param("..", marks=pytest.mark.case("BI-30")),
        pytest.param("", marks=pytest.mark.case("BI-31")),
        pytest.param("x" * 2000, marks=pytest.mark.case("BI-32"), id="x*2000"),
    ])
    def test_invalid_ids(self, env: Env, bad_id: str) -> None:
        """Ids with '/', '..', empty or absurd length are refused before anything is made."""
        bundle = env.bundle(["true"])
        res = run_in_work(env, "create", "--bundle", str(bundle.path), bad_id)
        assert 0 != res.returncode
        assert "invalid container ID format" in res.stderr
        assert not env.root.exists() or [] == list(env.root.iterdir())
        assert [] == traces(env)


class TestUnknownId:
    @pytest.mark.parametrize("verb", [["state"], ["start"], ["kill"], ["kill", "--all"],
                                      ["delete"]])
    @pytest.mark.case("BI-26")
    def test_unknown_id(self, env: Env, verb: list[str]) -> None:
        """Every verb on an unknown id says `container does not exist` and logs it, and
        makes nothing."""
        res = run_in_work(env, *verb, "ghost")
        assert 0 != res.returncode
        assert "container does not exist" in res.stderr
        assert "container does not exist" == env.errors()[-1]["msg"]
        assert [] == traces(env, "ghost")

    @pytest.mark.case("BI-27")
    def test_delete_force_unknown_id_succeeds(self, env: Env) -> None:
        """delete --force of an unknown id succeeds silently, as runc's does, and makes
        nothing."""
        res = run_in_work(env, "delete", "--force", "ghost")
        assert (0, "", "") == (res.returncode, res.stdout, res.stderr)
        assert [] == env.errors()
        assert [] == traces(env, "ghost")
