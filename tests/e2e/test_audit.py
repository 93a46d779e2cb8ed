"""Audit trail: one record per lifecycle event in the site's JSON-lines file and in a
real syslog daemon (rsyslogd, tag scrun-py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import BASE, STATE, TEST_USER, VENV, Env, User, wait_until
from tests.e2e.test_engines import Engine, _guarded, engines_up  # noqa: F401 - fixture

pytestmark = pytest.mark.e2e

SYSLOG = Path("/var/log/syslog")


def _syslog_listening() -> bool:
    """Something reads /dev/log (pgrep would also see an rsyslogd of another root directory)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect("/dev/log")
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def rsyslogd() -> Iterator[Path]:
    started = not _syslog_listening()
    if started:  # rsyslog is installed by scripts/cluster.sh
        subprocess.run(["rsyslogd"], check=True)
        time.sleep(0.5)
    yield SYSLOG
    if started:
        _stop_rsyslogd()


def _stop_rsyslogd() -> None:
    """The rsyslogd the fixture started (its pid file is /run/rsyslogd.pid): SIGTERM,
    SIGKILL after 10 s, reaped where it is this process's child (the session is a child
    subreaper, tests/e2e/conftest.py), waited for until it is gone (20 s at most)."""
    try:
        pid = int(Path("/run/rsyslogd.pid").read_text().strip())
        if Path(f"/proc/{pid}/exe").resolve().name != "rsyslogd":
            return
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    start = time.monotonic()
    killed = False
    while Path(f"/proc/{pid}").exists() and time.monotonic() < start + 20:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not this process's child: its parent reaps it
        if not killed and time.monotonic() > start + 10:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            killed = True
        time.sleep(0.1)


def _syslog_lines(path: Path, cid: str) -> list[str]:
    text = path.read_text(errors="replace") if path.exists() else ""
    return [ln for ln in text.splitlines() if "scrun-py[" in ln and cid in ln]


def _site_made(path: Path) -> None:
    """The shared audit file as docs/audit.md has the site make it: root's, 0622."""
    path.touch()
    os.chmod(path, 0o622)


class TestAudit:
    def test_lifecycle_events_in_file_and_syslog(self, user_env: Env, conf_dir: Path,
                                                 rsyslogd: Path) -> None:
        """create, start, kill, exit and delete each leave one record with user, uid,
        container id, job id, bundle, engine and the signal or exit code."""
        env = user_env
        audit_file = env.work / "audit.jsonl"
        _site_made(audit_file)
        (conf_dir / "scrun-py.toml").write_text(
            f'[audit]\nfile = "{audit_file}"\nsyslog = true\n')
        conf = conf_dir / "slurm.conf"
        cid = f"aud{os.getpid()}"
        bundle = env.bundle(["sh", "-c", 'trap "exit 5" USR1; echo up; '
                             "while :; do sleep 0.1; done"])
        created = env.create(cid, bundle, conf=conf)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", cid, conf=conf).returncode
        deadline = time.monotonic() + 30
        while "up" not in created.stdout():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert 0 == env.run("kill", cid, "USR1", conf=conf).returncode
        assert 5 == created.wait_exit()
        assert 0 == env.run("delete", cid, conf=conf).returncode
        records = [json.loads(line) for line in audit_file.read_text().splitlines()]
        assert ["create", "start", "kill", "exit", "delete"] == [r["event"] for r in records]
        for r in records:
            assert (env.user.name, env.user.uid, cid, job) == (r["user"], r["uid"],
                                                               r["container_id"], r["job_id"])
            assert {"time", "bundle", "engine"} <= set(r)
        assert 10 == records[2]["signal"]
        assert 5 == records[3]["exit_code"]
        # rsyslogd writes each line when it gets to it: wait for the fifth
        wait_until(lambda: len(_syslog_lines(rsyslogd, cid)) >= 5,
                   f"five syslog lines of {cid} in {rsyslogd}", timeout=20)
        time.sleep(0.5)  # and for a sixth, which must not come
        assert 5 == len(_syslog_lines(rsyslogd, cid)), _syslog_lines(rsyslogd, cid)

    def test_failure_is_audited(self, user_env: Env, conf_dir: Path) -> None:
        """A create that fails leaves a create-failed record with the error."""
        env = user_env
        audit_file = env.work / "audit.jsonl"
        _site_made(audit_file)
        (conf_dir / "scrun-py.toml").write_text(f'[audit]\nfile = "{audit_file}"\n')
        bundle = env.bundle(["true"], env=["SCRUN_PARTITION=nosuch"])
        res = env.run("create", "--bundle", str(bundle.path), "bad",
                      conf=conf_dir / "slurm.conf")
        assert 0 != res.returncode
        (record,) = [json.loads(line) for line in audit_file.read_text().splitlines()]
        assert ("create-failed", "bad") == (record["event"], record["container_id"])
        assert "partition" in record["error"].lower()

    def test_bad_site_file_fails_create(self, user_env: Env, conf_dir: Path) -> None:
        """An invalid scrun-py.toml fails create with the file and the key named."""
        env = user_env
        (conf_dir / "scrun-py.toml").write_text('[audit]\nfiel = "/x"\n')
        bundle = env.bundle(["true"])
        res = env.run("create", "--bundle", str(bundle.path), "c",
                      conf=conf_dir / "slurm.conf")
        assert 0 != res.returncode
        assert "scrun-py.toml" in res.stderr and "fiel" in res.stderr


@pytest.fixture
def rootless_podman(engines_up: None) -> Iterator[Engine]:  # noqa: F811
    yield from _guarded(Engine("podman", User.named(TEST_USER)))


class TestAuditThroughRootlessPodman:
    @pytest.mark.engines
    def test_records_name_the_real_user(self, rootless_podman: Engine) -> None:
        """Rootless podman runs scrun-py as root of the user's namespace: every record of
        a `podman run` (create, start, exit, delete, from create and from the anchor)
        names the test user and their uid, none root or 0, in the user's own file.  The
        run uses a runtime wrapper of its own (`podman --runtime`) with a copy of the
        engines' configuration, so the shared one is never changed."""
        eng = rootless_podman
        conf = BASE / f"audit-conf-{uuid.uuid4().hex[:8]}"
        logdir = conf / "audit"
        logdir.mkdir(parents=True)
        os.chmod(conf, 0o755)
        os.chmod(logdir, 0o1733)
        for name in ("slurm.conf", "oci.conf", "scrun.lua"):
            (conf / name).write_bytes((STATE / "engines" / "conf" / name).read_bytes())
            os.chmod(conf / name, 0o644)
        (conf / "scrun-py.toml").write_text(
            f'[audit]\nfile = "{logdir}/{{user}}.jsonl"\nsyslog = false\n')
        os.chmod(conf / "scrun-py.toml", 0o644)
        wrapper = conf / "runtime"
        wrapper.write_text(f'#!/bin/sh\nexec {VENV}/bin/scrun-py -f {conf}/slurm.conf "$@"\n')
        os.chmod(wrapper, 0o755)
        try:
            res = eng("--runtime", str(wrapper), *eng.run_args(), "--rm", eng.image, "true")
            assert 0 == res.returncode, res.stderr
            path = logdir / f"{eng.user.name}.jsonl"
            records = [json.loads(line) for line in path.read_text().splitlines()]
            assert {"create", "start", "exit", "delete"} <= {r["event"] for r in records}
            assert {(eng.user.name, eng.user.uid, "podman")} == {
                (r["user"], r["uid"], r["engine"]) for r in records}, records
            assert (eng.user.uid, [path.name]) == (
                path.stat().st_uid, sorted(p.name for p in logdir.iterdir()))
        finally:
            subprocess.run(["rm", "-rf", str(conf)], check=False)
