"""`scrun-py doctor` on the real machine: all good, then each check broken for real."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO_ROOT, SCRUN, SITE, Env, User, slurm_release
from tests.e2e.test_faults import _ctld

pytestmark = pytest.mark.e2e

#: a hang guard, not a speed target: doctor's commands share one 4 s deadline
HANG_GUARD_S = 10


@contextmanager
def controller_on_unused_port(conf_dir: Path) -> Iterator[Path]:
    """conf_dir's slurm.conf, its SlurmctldPort a port bound here but not listening
    (connections are refused) while the context lasts."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        conf = conf_dir / "slurm.conf"
        conf.write_text(re.sub(r"(?m)^SlurmctldPort=.*$",
                               f"SlurmctldPort={held.getsockname()[1]}", conf.read_text()))
        yield conf


def _doctor(env: Env, *args: str, conf: Path | None = None,
            extra_env: dict[str, str] | None = None) -> tuple[int, dict[str, dict[str, str]]]:
    argv = env.cmd("doctor", "--json", *args, conf=conf, log=False)
    res = subprocess.run(argv, env={**env.user.env(), **(extra_env or {})},
                         capture_output=True, text=True, timeout=120)
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    return res.returncode, checks


def _engine_env() -> dict[str, str]:
    out = subprocess.run([str(REPO_ROOT / "scripts" / "engines.sh"), "env"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.split())


class TestDoctor:
    def test_working_machine(self, user_env: Env) -> None:
        """On the set-up machine every check passes (no scrun.lua is only a warning) and
        podman's configuration is recognised."""
        rc, checks = _doctor(user_env, extra_env=_engine_env())
        assert 0 == rc, checks
        failed = [n for n, c in checks.items() if c["status"] == "failed"]
        assert [] == failed
        assert "ok" == checks["docker/podman runtime"]["status"]
        assert "UP" in checks["slurmctld answering"]["found"]

    def test_table_output(self, user_env: Env) -> None:
        """Without --json, doctor prints one ✔/✘/! line per check."""
        res = subprocess.run(user_env.cmd("doctor", log=False), env=user_env.user.env(),
                             capture_output=True, text=True, timeout=120)
        assert 0 == res.returncode
        assert res.stdout.startswith("✔ slurm.conf")
        assert 15 == sum(1 for ln in res.stdout.splitlines() if ln[:1] in "✔✘!-")

    def test_missing_slurm_conf(self, user_env: Env, tmp_path: Path) -> None:
        """A slurm.conf that does not exist is fatal, and said to be the cause: the
        checks that need it are skipped (srun and scontrol would retry reading it for
        60 s), nothing blames srun."""
        started = time.monotonic()
        rc, checks = _doctor(user_env, conf=Path("/nonexistent/slurm.conf"))
        assert time.monotonic() - started < HANG_GUARD_S
        assert 1 == rc
        assert ("failed", "/nonexistent/slurm.conf: not found (from -f)") == (
            checks["slurm.conf"]["status"], checks["slurm.conf"]["found"])
        for name in ("Slurm client commands", "Slurm release", "slurmctld answering",
                     "oci.conf"):
            assert "skipped" == checks[name]["status"], checks[name]
            assert "/nonexistent/slurm.conf: not found" in checks[name]["found"]
        assert [] == [n for n, c in checks.items() if "srun" in c["fix"]]

    def test_controller_on_unused_port(self, user_env: Env, conf_dir: Path) -> None:
        """A slurm.conf naming a controller on a port nothing listens on: doctor ends
        promptly and shows scontrol's DOWN line (not its banner of asterisks)."""
        with controller_on_unused_port(conf_dir) as conf:
            started = time.monotonic()
            rc, checks = _doctor(user_env, conf=conf)
        assert time.monotonic() - started < HANG_GUARD_S
        assert 1 == rc
        ctld = checks["slurmctld answering"]
        assert "failed" == ctld["status"]
        assert ctld["found"].endswith(" is DOWN"), ctld
        assert "SlurmctldPort" in ctld["fix"]

    def test_broken_oci_conf(self, user_env: Env, conf_dir: Path) -> None:
        """An oci.conf with an unknown key fails, naming the key."""
        (conf_dir / "oci.conf").write_text((conf_dir / "oci.conf").read_text() + "Bogus=1\n")
        rc, checks = _doctor(user_env, conf=conf_dir / "slurm.conf")
        assert 1 == rc
        assert "Bogus" in checks["oci.conf"]["found"]

    def test_oci_conf_this_slurm_cannot_run(self, user_env: Env, conf_dir: Path) -> None:
        """%U is valid oci.conf syntax, but Slurm 22.05's slurmstepd cannot expand it:
        doctor fails it there and accepts it on a newer release."""
        text = (conf_dir / "oci.conf").read_text().replace("%u", "%U")
        (conf_dir / "oci.conf").write_text(text)
        rc, checks = _doctor(user_env, conf=conf_dir / "slurm.conf")
        if slurm_release() < (23, 2):
            assert 1 == rc
            assert "%U" in checks["oci.conf"]["found"]
        else:
            assert "ok" == checks["oci.conf"]["status"], checks["oci.conf"]

    def test_broken_scrun_lua(self, user_env: Env, conf_dir: Path) -> None:
        """A scrun.lua without stage_out fails, naming the script."""
        (conf_dir / "scrun.lua").write_text("function slurm_scrun_stage_in() return 0 end\n")
        rc, checks = _doctor(user_env, conf=conf_dir / "slurm.conf")
        assert 1 == rc
        assert "scrun.lua" in checks["scrun.lua"]["found"]

    def test_run_without_exec_is_a_warning(self, user_env: Env, conf_dir: Path) -> None:
        """A RunTimeRun that the shell forks (no exec) lets a container outlive scancel."""
        text = (conf_dir / "oci.conf").read_text().replace('RunTimeRun="exec ', 'RunTimeRun="')
        (conf_dir / "oci.conf").write_text(text)
        rc, checks = _doctor(user_env, conf=conf_dir / "slurm.conf")
        assert 0 == rc
        assert ("warning", True) == (checks["oci.conf"]["status"],
                                     "exec" in checks["oci.conf"]["found"])
        assert "ok" == checks["OCI runtime"]["status"]

    def test_site_file(self, user_env: Env, conf_dir: Path) -> None:
        """A valid scrun-py.toml is summarised; a typo in it is fatal, naming the key."""
        (conf_dir / "scrun-py.toml").write_text("[policy]\nreadonly_rootfs = true\n")
        rc, checks = _doctor(user_env, conf=conf_dir / "slurm.conf")
        assert ("ok", "no audit trail; policy: readonly_rootfs") == (
            checks["scrun-py.toml"]["status"], checks["scrun-py.toml"]["found"].split(": ", 1)[1])
        (conf_dir / "scrun-py.toml").write_text("[policy]\nreadonly_rootf = true\n")
        rc, checks = _doctor(user_env, conf=conf_dir / "slurm.conf")
        assert 1 == rc
        assert "unknown key readonly_rootf" in checks["scrun-py.toml"]["found"]

    def test_runtime_missing(self, user_env: Env, conf_dir: Path) -> None:
        """An oci.conf whose runtime is not installed fails the runtime check."""
        text = (conf_dir / "oci.conf").read_text().replace("crun ", "nosuchruntime ")
        (conf_dir / "oci.conf").write_text(text)
        rc, checks = _doctor(user_env, conf=conf_dir / "slurm.conf")
        assert 1 == rc
        assert "nosuchruntime" in checks["OCI runtime"]["found"]

    def test_root_not_writable(self, user_env: Env) -> None:
        """A --root the user cannot write is fatal."""
        argv = user_env.cmd("doctor", "--json", log=False)
        argv[argv.index("--root") + 1] = "/root/scrun"
        res = subprocess.run(argv, env=user_env.user.env(), capture_output=True, text=True,
                             timeout=120)
        checks = {c["name"]: c for c in json.loads(res.stdout)}
        assert 1 == res.returncode
        assert "failed" == checks["--root"]["status"]

    def test_slurmctld_down(self, user_env: Env) -> None:
        """With slurmctld stopped, doctor says so and fails."""
        _ctld("stop")
        try:
            rc, checks = _doctor(user_env)
        finally:
            _ctld("start")
        assert 1 == rc
        assert "failed" == checks["slurmctld answering"]["status"]
        assert checks["slurmctld answering"]["found"].endswith(" is DOWN")


def _staging_copy(env: Env, staging_base: str, cache_base: str | None = None) -> Path:
    """The shipped staging script with its bases set, in the test's work dir."""
    text = (REPO_ROOT / "lua" / "scrun-staging.lua").read_text()
    text = re.sub(r'(?m)^local STAGING_BASE = "[^"]*"', f'local STAGING_BASE = "{staging_base}"',
                  text)
    if cache_base is None:
        text = re.sub(r"(?m)^local CACHE = true", "local CACHE = false", text)
    else:
        text = re.sub(r'(?m)^local CACHE_BASE = "[^"]*"', f'local CACHE_BASE = "{cache_base}"',
                      text)
    script = env.work / "scrun-staging.lua"
    script.write_text(text)
    env.chown(script)
    return script


class TestSiteChecks:
    """What doctor says of the site's files, of a root engine and of the staging base,
    on the cluster under test (the one-machine cluster, or the site cluster)."""

    def test_staging_base_seen_from_a_node(self, user_env: Env) -> None:
        """The staging script's base in the tests' shared directory: one step on a node
        sees the marker; the marker is gone after."""
        base = user_env.work / "staging"
        base.mkdir()
        user_env.chown(base)
        script = _staging_copy(user_env, f"{base}/%u")
        started = time.monotonic()
        _, checks = _doctor(user_env, extra_env={"SCRUN_PY_LUA": str(script)})
        check = checks["staging base"]
        assert ("ok", f"STAGING_BASE {base}/{user_env.user.uid}: seen from node") == \
            (check["status"], check["found"].rsplit(" ", 1)[0]), check
        assert time.monotonic() - started < 60
        assert [] == list(base.iterdir())
        assert f"{script} (named by SCRUN_PY_LUA)" in checks["scrun.lua"]["found"]

    def test_staging_base_without_a_cluster(self, user_env: Env, conf_dir: Path) -> None:
        """A controller on a port nothing listens on: doctor says it could not probe,
        and warns of a base in /tmp, without waiting for a step."""
        script = _staging_copy(user_env, "/tmp/scrun-staging-%u")
        with controller_on_unused_port(conf_dir) as conf:
            started = time.monotonic()
            _, checks = _doctor(user_env, conf=conf, extra_env={"SCRUN_PY_LUA": str(script)})
        assert time.monotonic() - started < HANG_GUARD_S
        check = checks["staging base"]
        assert ("warning", True) == (check["status"],
                                     "could not probe from a node" in check["found"]), check

    def test_root_dockerd_warning(self, tmp_path: Path) -> None:
        """The test machine's root dockerd has scrun-py as a runtime: doctor, as root,
        warns that its containers are jobs of root."""
        root = User.named("root")
        env = {**root.env(), **_engine_env()}
        runtimes = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"],
                                  env=env, capture_output=True, text=True, timeout=60)
        assert "scrun-py" in runtimes.stdout, runtimes.stderr  # the machine as set up
        res = subprocess.run([str(SCRUN), "--root", str(tmp_path / "root"), "doctor",
                              "--json"], env=env, capture_output=True, text=True,
                             timeout=120)
        check = {c["name"]: c for c in json.loads(res.stdout)}["root engine"]
        assert ("warning", True) == (check["status"],
                                     check["found"].startswith("root dockerd (docker info")), \
            check
        assert "jobs of root (no per-user accounting, limits or fair share)" in check["found"]


@pytest.fixture
def site_cluster(cluster: Path) -> None:
    if not SITE:
        pytest.skip("not the site cluster: run scripts/cluster.sh up --slurm R --nodes 3 "
                    "(23.11+) and the env it prints (scripts/test.sh does)")


@pytest.mark.usefixtures("site_cluster")
class TestConfiglessLoginNode:
    """On the site cluster's configless login node (sackd's copies in /run/slurm/conf,
    no slurm.conf elsewhere), doctor run by the test user with no -f and no SLURM_CONF."""

    def test_finds_sackds_copies(self, user_env: Env) -> None:
        """slurm.conf is sackd's copy, said so; oci.conf and scrun.lua are read beside
        it, scrun-py.toml is the system's; nothing is skipped for want of slurm.conf and
        nothing fails; the site's staging base is seen from a node."""
        assert "SLURM_CONF" not in user_env.user.env()
        rc, checks = _doctor(user_env)
        assert ("ok", "/run/slurm/conf/slurm.conf (configless copy, written by sackd)") == \
            (checks["slurm.conf"]["status"], checks["slurm.conf"]["found"])
        assert checks["oci.conf"]["found"].startswith("/run/slurm/conf/oci.conf ("), checks
        assert checks["scrun.lua"]["found"].startswith(
            "/run/slurm/conf/scrun.lua (beside slurm.conf): loads"), checks
        assert checks["scrun-py.toml"]["found"].startswith(
            "/etc/slurm/scrun-py.toml (the system's: slurm.conf is a configless copy"), checks
        assert [] == [n for n, c in checks.items() if c["status"] in ("failed", "skipped")]
        assert "ok" == checks["staging base"]["status"], checks["staging base"]
        assert 0 == rc

    def test_staging_base_in_tmp_is_not_seen(self, user_env: Env) -> None:
        """The staging script with its base in the login node's /tmp: the node's /tmp is
        its own, and doctor says the base is not visible from the nodes."""
        script = _staging_copy(user_env, "/tmp/scrun-staging-%u")
        rc, checks = _doctor(user_env, extra_env={"SCRUN_PY_LUA": str(script)})
        check = checks["staging base"]
        assert ("failed", True) == (check["status"], check["found"].startswith(
            "not visible from node n")), check
        assert f"STAGING_BASE /tmp/scrun-staging-{user_env.user.uid} (a marker made here in" \
            in check["found"]
        assert 1 == rc

