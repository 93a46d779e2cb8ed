"""Faults on the real cluster: the anchor killed, the job cancelled, signals to the anchor,
slurmctld down.  Every case ends with no job, anchor, socket or spool dir left."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import STATE, Env, leftovers, slurm_env, squeue, wait_anchor

pytestmark = pytest.mark.e2e

STAGE_OUT_MARK = r"""
function slurm_scrun_stage_in(...) return slurm.SUCCESS end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
                               config_file, job_id)
  local f = assert(io.open(%s .. "/stage_out." .. id, "w")); f:write(tostring(job_id)); f:close()
  return 0
end
return slurm.SUCCESS
"""


def _job_running(job: int) -> bool:
    return squeue("-j", str(job), "-o", "%T").strip() in ("RUNNING", "PENDING", "CONFIGURING",
                                                          "COMPLETING")


def _wait(predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def _running(env: Env, cid: str, conf: Path | None = None) -> tuple[object, int]:
    # wait until the container really runs: Slurm 22.05 cannot clean up a container step
    # cancelled while the runtime is still creating it (the node drains)
    bundle = env.bundle(["sh", "-c", "echo started; exec sleep 300"])
    created = env.create(cid, bundle, conf=conf)
    assert 0 == created.rc, created.stderr()
    assert 0 == env.run("start", cid, conf=conf).returncode
    _wait(lambda: "started" in created.stdout())
    return created, created.job_id()


def _anchor_pid(env: Env, cid: str) -> int:
    """The anchor's pid (the record's; the pid file names the container's pid)."""
    return int(json.loads((env.root / cid / "state.json").read_text())["anchor_pid"])


class TestAnchorFaults:
    @pytest.mark.case("F-03")
    def test_anchor_sigkill(self, env: Env) -> None:
        """SIGKILL of the anchor: state says stopped, the job ends by itself (no orphan job),
        delete --force cleans up."""
        created, job = _running(env, "ak")
        # the anchor writes on-abandon.sh once the step runs; killing it earlier leaves
        # only scancel, which Slurm 22.05 cannot apply cleanly to a container step
        _wait((env.root / "ak" / "on-abandon.sh").exists, 30)
        anchor = _anchor_pid(env, "ak")
        os.kill(anchor, signal.SIGKILL)
        assert -signal.SIGKILL == wait_anchor(anchor)
        # the container's pid (the namespace holder) exits 137 when its anchor is killed
        assert 137 == created.wait_exit()  # type: ignore[attr-defined]
        assert "stopped" == env.state("ak")["status"]
        _wait(lambda: not _job_running(job), 60)
        assert 0 == env.run("delete", "--force", "ak").returncode
        assert [] == leftovers(env, "ak", [job])

    @pytest.mark.case("F-04")
    @pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
    def test_signal_to_anchor(self, env: Env, conf_dir: Path, sig: signal.Signals) -> None:
        """SIGTERM/SIGINT to the anchor: the container is stopped, stage_out runs, the job
        ends, and the anchor exits."""
        out = env.work / "marks"
        out.mkdir()
        env.chown(out)
        (conf_dir / "scrun.lua").write_text(STAGE_OUT_MARK % repr(str(out)).replace("'", '"'))
        created, job = _running(env, "as", conf=conf_dir / "slurm.conf")
        anchor = _anchor_pid(env, "as")
        os.kill(anchor, sig)
        rc = wait_anchor(anchor, timeout=60)
        assert rc != 0
        assert rc == created.wait_exit()  # type: ignore[attr-defined]  # the reported pid's
        assert str(job) == (out / "stage_out.as").read_text()
        # the anchor has ended the job; under load Slurm may still list it COMPLETING
        _wait(lambda: not _job_running(job), 30)
        assert "stopped" == env.state("as")["status"]
        assert 0 == env.run("delete", "as", conf=conf_dir / "slurm.conf").returncode
        assert [] == leftovers(env, "as", [job])

    @pytest.mark.case("F-09")
    def test_scancel_mid_run(self, env: Env, conf_dir: Path) -> None:
        """scancel of the job while its container runs (a pid-namespace init that ignores
        SIGTERM): the anchor exits 137, state says stopped, stage_out runs, and Slurm's own
        kill reaches the container (oci.conf's `exec`), so no process is left and the node
        does not drain (the env fixture fails the test if it does)."""
        out = env.work / "marks"
        out.mkdir()
        env.chown(out)
        (conf_dir / "scrun.lua").write_text(STAGE_OUT_MARK % repr(str(out)).replace("'", '"'))
        created, job = _running(env, "sc", conf=conf_dir / "slurm.conf")
        subprocess.run(["scancel", str(job)], env=slurm_env(), check=True, timeout=30)
        assert 137 == created.wait_exit(timeout=60)  # type: ignore[attr-defined]
        assert "stopped" == env.state("sc")["status"]
        assert str(job) == (out / "stage_out.sc").read_text()
        records = [r for r in env.log_records() if r.get("msg") == "job ended while the "
                   "container ran"]
        assert 1 == len(records), env.log_records()
        # Slurm's own teardown: KillWait, then SIGKILL to the runtime and the container
        _wait(lambda: not _job_running(job), 120)
        assert "" == _container_processes(env, job)
        assert 0 == env.run("delete", "sc", conf=conf_dir / "slurm.conf").returncode
        assert [] == leftovers(env, "sc", [job])


def _container_processes(env: Env, job: int) -> str:
    """This job's container if anything of it still runs on the node: its runtime process
    (`crun run … <node>.<user>.<job>.0.0`) or a running container in crun's state."""
    found = subprocess.run(["pgrep", "-af", f"\\.{job}\\.0\\.0$"], capture_output=True,
                           text=True, timeout=30).stdout.strip()
    node = socket.gethostname().split(".")[0]
    state = subprocess.run(env.user.argv(
        ["crun", "--rootless=true", f"--root=/tmp/ocistate-{env.user.name}", "state",
         f"{node}.{env.user.name}.{job}.0.0"]), capture_output=True, text=True, timeout=30)
    if state.returncode == 0 and '"running"' in state.stdout:
        found += state.stdout
    return found


def _ctld(action: str) -> None:
    pid_file = STATE / "ctld" / "slurmctld.pid"
    if action == "stop":
        pid = int(pid_file.read_text())
        # the cluster's own slurmctld only, never a process that reuses a stale pid
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            assert f"{STATE}/".encode() in fh.read(), f"pid {pid} is not this cluster's slurmctld"
        os.kill(pid, signal.SIGTERM)
        for _ in range(200):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().split(") ")[1][0] in "ZX":
                        break
            except OSError:
                break
            time.sleep(0.05)
    else:
        subprocess.run(["slurmctld", "-f", str(STATE / "slurm.conf")], check=True, timeout=60)
        _wait(lambda: subprocess.run(["sinfo", "-h"], env=slurm_env(), capture_output=True,
                                     timeout=30).returncode == 0, 60)


class TestControllerFaults:
    @pytest.mark.case("F-01")
    def test_controller_down_at_create(self, user_env: Env) -> None:
        """slurmctld down: create fails after the configured wait with a clear error and
        leaves nothing behind."""
        env = user_env
        bundle = env.bundle(["true"])
        _ctld("stop")
        try:
            t0 = time.monotonic()
            created = env.create("down", bundle,
                                 env=env.user.env(SCRUN_PY_ALLOC_TIMEOUT="5"), timeout=120)
            elapsed = time.monotonic() - t0
        finally:
            _ctld("start")
        assert 0 != created.rc
        assert elapsed < 60
        assert "job allocation" in created.stderr()
        assert [] == leftovers(env, "down")

    @pytest.mark.case("F-02")
    def test_controller_restart_while_running(self, user_env: Env) -> None:
        """slurmctld restarted while a container runs: the container finishes normally.
        If the restart catches srun creating the step (24.11's srun then gives up with
        "Unable to create step ...: Connection reset by peer"), the anchor launches the
        step again; it runs once slurmctld has the node back (about 2 minutes here)."""
        env = user_env
        bundle = env.bundle(["sh", "-c", "sleep 3; echo done"])
        created = env.create("rs", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", "rs").returncode
        _ctld("stop")
        time.sleep(0.5)
        _ctld("start")
        assert 0 == created.wait_exit(timeout=300)
        assert "done\n" == created.stdout()
        assert 0 == env.run("delete", "rs").returncode
        assert [] == leftovers(env, "rs", [job])
