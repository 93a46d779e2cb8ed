"""scrun.lua hooks on the real cluster: arguments, job_env, staging, slurm.* commands."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO_ROOT, SITE, Env, leftovers, scontrol_job, site_staging_script

pytestmark = pytest.mark.e2e

SCRUN_OUTPUTS = ("SCRUN_OCI_VERSION", "SCRUN_CONTAINER_ID", "SCRUN_PID", "SCRUN_BUNDLE",
                 "SCRUN_SUBMISSION_BUNDLE", "SCRUN_PID_FILE", "SCRUN_SOCKET", "SCRUN_SPOOL_DIR",
                 "SCRUN_SUBMISSION_CONFIG_FILE", "SCRUN_USER", "SCRUN_USER_ID", "SCRUN_GROUP",
                 "SCRUN_GROUP_ID", "SCRUN_ROOT", "SCRUN_ROOTFS_PATH",
                 "SCRUN_SUBMISSION_ROOTFS_PATH", "SCRUN_LOG_FILE", "SCRUN_LOG_FORMAT",
                 "SCRUN_ANNOTATION_org.example.k")

RECORDER = r"""
local OUT = %(out)q
local STAGED = %(staged)q
local function save(name, t)
  local f = assert(io.open(OUT .. "/" .. name .. ".json", "w"))
  f:write(slurm.to_json(t)); f:close()
end
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  local env = {}
  for _, kv in ipairs(job_env) do env[#env + 1] = kv end
  local rc, out = slurm.allocator_command("echo from-allocator; exit 3")
  local rrc, host = slurm.remote_command("hostname")
  local st = slurm.allocator_command("cp -a '" .. bundle .. "' '" .. STAGED .. "'")
  local old_bundle = slurm.set_bundle_path(STAGED)
  local old_root = slurm.set_root_path(STAGED .. "/rootfs")
  save("stage_in", {args = {id, bundle, spool_dir, config_file, job_id, user_id, group_id},
                    env = env, alloc_rc = rc, alloc_out = out, remote_rc = rrc,
                    remote_out = host, copy_rc = st, old_bundle = old_bundle,
                    old_root = old_root})
  return slurm.SUCCESS
end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path,
                               spool_dir, config_file, job_id, user_id, group_id)
  local seen = slurm.allocator_command("test -f '" .. root_path .. "/marker'")
  local back = slurm.allocator_command("cp '" .. root_path .. "/marker' '" .. orig_root_path
                                       .. "/marker'")
  save("stage_out", {args = {id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
                             config_file, job_id, user_id, group_id},
                     marker_in_staged = seen, copy_back = back})
  return 0
end
return slurm.SUCCESS
"""


def _lua_quote(s: str) -> str:
    return json.dumps(s)


class TestHooksOnCluster:
    def test_arguments_env_staging_and_commands(self, env: Env, conf_dir: Path) -> None:
        """stage_in gets Slurm's arguments and a job_env with SLURM_JOB_ID and every SCRUN_*
        output; allocator/remote commands work; the step runs from the staged bundle; stage_out
        sees the original paths and the marker the container wrote."""
        out = env.work / "hook-out"
        out.mkdir()
        env.chown(out)
        staged = env.work / "staged"
        script = RECORDER.replace("%(out)q", _lua_quote(str(out))).replace(
            "%(staged)q", _lua_quote(str(staged)))
        (conf_dir / "scrun.lua").write_text(script)
        bundle = env.bundle(["sh", "-c", "echo hi > /marker"],
                            annotations={"org.example.k": "v"})
        cfg = bundle.config()
        cfg["root"]["readonly"] = False  # type: ignore[index]
        bundle.config_file.write_text(json.dumps(cfg))
        created = env.create("hk", bundle, conf=conf_dir / "slurm.conf")
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        state = env.state("hk")
        assert str(staged) == state["bundle"]
        assert f"{staged}/rootfs" == state["rootfs"]
        assert 0 == env.run("start", "hk", conf=conf_dir / "slurm.conf").returncode
        assert 0 == created.wait_exit(), created.stderr()

        sin = json.loads((out / "stage_in.json").read_text())
        assert ["hk", str(bundle.path), str(env.root / "hk"), str(bundle.config_file), job,
                env.user.uid, env.user.gid] == sin["args"]
        names = {kv.split("=", 1)[0]: kv.split("=", 1)[1] for kv in sin["env"]}
        assert str(job) == names["SLURM_JOB_ID"]
        assert [] == [n for n in SCRUN_OUTPUTS if n not in names]
        assert "v" == names["SCRUN_ANNOTATION_org.example.k"]
        assert (3, "from-allocator\n") == (sin["alloc_rc"], sin["alloc_out"])
        # remote_command runs on the job's node: on the site cluster one of n1..n3 (its
        # hostname is its node name), on the one-node cluster this machine
        node = (scontrol_job(job)["NodeList"] if SITE
                else socket.gethostname().split(".")[0])
        assert (0, node + "\n") == (sin["remote_rc"], sin["remote_out"])
        assert (str(bundle.path), str(bundle.path / "rootfs")) == (sin["old_bundle"],
                                                                   sin["old_root"])

        sout = json.loads((out / "stage_out.json").read_text())
        assert ["hk", str(staged), str(bundle.path), f"{staged}/rootfs",
                str(bundle.path / "rootfs"), str(env.root / "hk"), str(bundle.config_file), job,
                env.user.uid, env.user.gid] == sout["args"]
        assert 0 == sout["marker_in_staged"]
        assert "hi\n" == (bundle.path / "rootfs" / "marker").read_text()
        assert 0 == env.run("delete", "hk", conf=conf_dir / "slurm.conf").returncode
        assert [] == leftovers(env, "hk", [job])

    def test_shipped_staging_script(self, user_env: Env, conf_dir: Path) -> None:
        """lua/scrun-staging.lua (on the site cluster with its base on the scratch, as a site
        installs it) copies the rootfs to scratch, the container runs from the copy (rootless
        crun), changes come back and the copy is removed."""
        env = user_env
        site_staging_script(conf_dir)
        bundle = env.bundle(["sh", "-c", "echo staged > /marker; echo ran"])
        cfg = bundle.config()
        cfg["root"]["readonly"] = False  # type: ignore[index]
        bundle.config_file.write_text(json.dumps(cfg))
        created = env.create("st", bundle, conf=conf_dir / "slurm.conf")
        assert 0 == created.rc, created.stderr()
        staged_bundle = str(env.state("st")["bundle"])
        assert staged_bundle != str(bundle.path)
        assert Path(staged_bundle, "config.json").exists()
        assert 0 == env.run("start", "st", conf=conf_dir / "slurm.conf").returncode
        assert 0 == created.wait_exit(), created.stderr()
        assert "ran\n" == created.stdout()
        assert "staged\n" == (bundle.path / "rootfs" / "marker").read_text()
        assert not Path(staged_bundle).exists()
        assert 0 == env.run("delete", "st", conf=conf_dir / "slurm.conf").returncode

    def test_shared_filesystem_script(self, env: Env, conf_dir: Path) -> None:
        """lua/scrun.lua (shared filesystem) loads and runs the container in place."""
        shutil.copy(REPO_ROOT / "lua" / "scrun.lua", conf_dir / "scrun.lua")
        bundle = env.bundle(["echo", "shared"])
        created = env.create("sh", bundle, conf=conf_dir / "slurm.conf")
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "sh", conf=conf_dir / "slurm.conf").returncode
        assert 0 == created.wait_exit()
        assert "shared\n" == created.stdout()
        assert 0 == env.run("delete", "sh", conf=conf_dir / "slurm.conf").returncode
