"""Bad input fails `create` (or the verb) with one clear line, an error record in --log,
a non-zero exit, and nothing left: no job, anchor, socket, spool dir or pid file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Env, squeue

pytestmark = pytest.mark.e2e


def _jobs(env: Env) -> list[str]:
    return squeue("-u", env.user.name, "-o", "%i").split()


def _assert_clean_failure(env: Env, created_rc: int, stderr: str, cid: str, needle: str,
                          jobs_before: list[str]) -> None:
    assert 0 != created_rc
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert 1 == len(lines), stderr
    assert needle in lines[0]
    errors = env.errors()
    assert errors, "no error record in --log"
    assert needle in str(errors[-1]["msg"])
    assert {"level", "msg", "time"} <= set(errors[-1])
    assert not (env.root / cid).exists()
    assert jobs_before == _jobs(env)


class TestBadCreate:
    def test_missing_bundle(self, env: Env) -> None:
        """A bundle directory that does not exist."""
        before = _jobs(env)
        res = env.run("create", "--bundle", str(env.work / "nope"), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "not a directory", before)

    def test_broken_config_json(self, env: Env) -> None:
        """config.json that is not JSON."""
        bundle = env.bundle(["true"])
        bundle.config_file.write_text("{ not json")
        before = _jobs(env)
        res = env.run("create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "not valid JSON", before)

    def test_args_not_a_list(self, env: Env) -> None:
        """process.args of the wrong type names the field."""
        bundle = env.bundle(["true"])
        cfg = bundle.config()
        cfg["process"]["args"] = "echo hi"  # type: ignore[index]
        bundle.config_file.write_text(json.dumps(cfg))
        before = _jobs(env)
        res = env.run("create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "process.args", before)

    def test_bad_oci_conf(self, env: Env, conf_dir: Path) -> None:
        """An unknown oci.conf key fails create with the key named."""
        (conf_dir / "oci.conf").write_text((conf_dir / "oci.conf").read_text()
                                           + "NoSuchKey=1\n")
        bundle = env.bundle(["true"])
        before = _jobs(env)
        res = env.run("create", "--bundle", str(bundle.path), "c", conf=conf_dir / "slurm.conf")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "NoSuchKey", before)

    def test_unknown_partition(self, env: Env) -> None:
        """An allocation Slurm refuses fails create with Slurm's reason (Slurm's scrun
        exits 0 here) and leaves no job."""
        bundle = env.bundle(["true"], env=["SCRUN_PARTITION=nosuchpart"])
        before = _jobs(env)
        res = env.run("create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "partition", before)

    def test_bad_time_limit(self, env: Env) -> None:
        """An invalid SCRUN_TIMELIMIT is rejected by salloc and reported."""
        bundle = env.bundle(["true"], env=["SCRUN_TIMELIMIT=soon"])
        before = _jobs(env)
        res = env.run("create", "--bundle", str(bundle.path), "c")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "time", before)

    def test_stage_in_failure(self, env: Env, conf_dir: Path) -> None:
        """stage_in returning -1 fails create, ends the job and leaves nothing."""
        (conf_dir / "scrun.lua").write_text(
            "function slurm_scrun_stage_in(id, bundle, spool, cfg, job, uid, gid, env)\n"
            "  return -1\nend\n"
            "function slurm_scrun_stage_out(...) return 0 end\n"
            "return slurm.SUCCESS\n")
        bundle = env.bundle(["true"])
        before = _jobs(env)
        res = env.run("create", "--bundle", str(bundle.path), "c", conf=conf_dir / "slurm.conf")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "scrun.lua", before)

    def test_lua_syntax_error(self, env: Env, conf_dir: Path) -> None:
        """A scrun.lua that does not load fails create before any allocation."""
        (conf_dir / "scrun.lua").write_text("function slurm_scrun_stage_in(\n")
        bundle = env.bundle(["true"])
        before = _jobs(env)
        res = env.run("create", "--bundle", str(bundle.path), "c", conf=conf_dir / "slurm.conf")
        _assert_clean_failure(env, res.returncode, res.stderr, "c", "scrun.lua", before)

    def test_duplicate_id(self, env: Env) -> None:
        """A second create with the same id fails with runc's message; the first survives."""
        bundle = env.bundle(["true"])
        first = env.create("dup", bundle)
        assert 0 == first.rc, first.stderr()
        res = env.run("create", "--bundle", str(bundle.path), "dup")
        assert 0 != res.returncode
        assert "container with given ID already exists" in res.stderr
        assert "created" == env.state("dup")["status"]
        assert 0 == env.run("delete", "dup").returncode

    @pytest.mark.parametrize("bad_id", ["a/b", "..", "", "x" * 2000])
    def test_invalid_ids(self, env: Env, bad_id: str) -> None:
        """Ids with '/', '..', empty or absurd length are refused before anything is made."""
        bundle = env.bundle(["true"])
        res = env.run("create", "--bundle", str(bundle.path), bad_id)
        assert 0 != res.returncode
        assert "invalid container ID format" in res.stderr
        assert not env.root.exists() or [] == list(env.root.iterdir())


class TestUnknownId:
    @pytest.mark.parametrize("verb", [["state"], ["start"], ["kill"], ["kill", "--all"],
                                      ["delete"]])
    def test_unknown_id(self, env: Env, verb: list[str]) -> None:
        """Every verb on an unknown id says `container does not exist` and logs it."""
        res = env.run(*verb, "ghost")
        assert 0 != res.returncode
        assert "container does not exist" in res.stderr
        assert "container does not exist" == env.errors()[-1]["msg"]

    def test_delete_force_unknown_id_succeeds(self, env: Env) -> None:
        """delete --force of an unknown id succeeds, as runc's does."""
        assert 0 == env.run("delete", "--force", "ghost").returncode
