"""`doctor` when things are missing or do not answer: each check bounded, each saying the
true cause (slurm.conf missing, slurmctld down, munged not running, oci.conf missing,
the runtime missing on this node).

Run in-process through the click CLI.  Stand-in commands on PATH play Slurm, munge and
the rest where a test needs them to misbehave; tests/e2e/test_doctor.py breaks the real
machine's."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.cli_run import run

#: a hang guard, not a speed target: doctor's own bound is PROBE_TIMEOUT_S (4 s)
HANG_GUARD_S = 10
#: what 22.05's `scontrol ping` prints while slurmctld is down
PING_DOWN = ("Slurmctld(primary) at ctl is DOWN\n"
             "*****************************************\n"
             "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
             "*****************************************\n")
MUNGED_DOWN = ('munge: Error: Failed to access "/run/munge/munge.socket.2": No such file or '
               "directory (Did you start munged?)")
STANDINS = ("salloc", "srun", "scancel", "squeue", "sinfo", "scontrol", "munge", "unmunge",
            "unshare", "docker")


def _doctor(tmp_path: Path, conf: Path,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, dict[str, str]], float]:
    """doctor --json: its exit status, its checks by name, and how long it took."""
    started = time.monotonic()
    code = run(["-f", str(conf), "--root", str(tmp_path / "root"), "doctor", "--json"])
    elapsed = time.monotonic() - started
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    return code, checks, elapsed


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory alone on PATH where each test writes the commands it needs; the
    others answer as a working machine does."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("srun", 'echo "slurm-wlm 22.05.8"'),
                       ("scontrol", 'echo "Slurmctld(primary) at ctl is UP"'),
                       ("munge", "echo MUNGE:cred:"), ("unmunge", "echo STATUS: Success"),
                       ("unshare", "exit 0"), ("docker", "exit 1"),
                       *((c, "exit 0") for c in ("salloc", "scancel", "squeue", "sinfo"))):
        _standin(bindir, name, body)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("SCRUN_PY_SLURM_BACKEND", "cli")
    yield bindir


def _standin(bindir: Path, name: str, body: str) -> None:
    (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bindir / name).chmod(0o755)


def _site(tmp_path: Path, runtime: str = "crun") -> Path:
    """A slurm.conf (contents for the stand-ins) with an oci.conf running `runtime`."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=c\nSlurmctldHost=ctl(127.0.0.1)\n")
    (etc / "oci.conf").write_text(
        f'RunTimeQuery="{runtime} state %n.%u.%j.%s.%t"\n'
        f'RunTimeKill="{runtime} kill %n.%u.%j.%s.%t"\n'
        f'RunTimeDelete="{runtime} delete --force %n.%u.%j.%s.%t"\n'
        f'RunTimeRun="exec {runtime} run --bundle %b %n.%u.%j.%s.%t"\n')
    return etc / "slurm.conf"


class TestNoSlurmConf:
    def test_says_so_and_skips_what_needs_it(self, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
        """No slurm.conf: that is the failure; srun and scontrol are not run (22.05's
        retry a missing slurm.conf for 60 s: doctor took 30 s and blamed srun), and each
        check that needs the file says it was skipped for want of it."""
        conf = tmp_path / "nowhere" / "slurm.conf"
        code, checks, elapsed = _doctor(tmp_path, conf, capsys)
        assert elapsed < HANG_GUARD_S
        assert 1 == code
        assert ("failed", f"{conf}: not found (from -f)") == (
            checks["slurm.conf"]["status"], checks["slurm.conf"]["found"])
        for name in ("slurmctld answering", "oci.conf", "scrun.lua", "scrun-py.toml"):
            assert "skipped" == checks[name]["status"], checks[name]
            assert checks[name]["found"].startswith("not checked: ")
            assert f"{conf}: not found" in checks[name]["found"]
        assert "skipped" == checks["OCI runtime"]["status"]
        if shutil.which("srun") is not None:  # else: missing commands, as before
            assert "skipped" == checks["Slurm client commands"]["status"]
            assert "skipped" == checks["Slurm release"]["status"]
        assert not any("no answer" in c["found"] or "timed out" in c["found"]
                       for c in checks.values())

    def test_slurm_conf_is_the_first_line(self, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
        """The table starts with slurm.conf, which the checks below it need; skipped
        checks are marked `-`."""
        run(["-f", str(tmp_path / "slurm.conf"), "--root", str(tmp_path), "doctor"])
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("✘ slurm.conf ")
        assert any(ln.startswith("- slurmctld answering ") for ln in lines)


class TestControllerDown:
    @pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs Slurm's scontrol")
    def test_unused_port(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A slurm.conf naming a controller on a port nothing listens on (bound, not
        listening: refused): the real scontrol's DOWN line, not its banner of
        asterisks."""
        with socket.socket() as held:
            held.bind(("127.0.0.1", 0))
            conf = tmp_path / "slurm.conf"
            conf.write_text("ClusterName=t\nSlurmctldHost=ctl(127.0.0.1)\n"
                            f"SlurmctldPort={held.getsockname()[1]}\n")
            code, checks, elapsed = _doctor(tmp_path, conf, capsys)
        assert elapsed < HANG_GUARD_S
        assert 1 == code
        ctld = checks["slurmctld answering"]
        assert "failed" == ctld["status"]
        assert ctld["found"].startswith("Slurmctld(primary) at ctl is DOWN"), ctld
        assert "*" not in ctld["found"]

    def test_down_line_shown(self, tmp_path: Path, standins: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
        _standin(standins, "scontrol", f"printf '%s' '{PING_DOWN}'; exit 1")
        code, checks, _ = _doctor(tmp_path, _site(tmp_path), capsys)
        assert 1 == code
        assert ("failed", "Slurmctld(primary) at ctl is DOWN") == (
            checks["slurmctld answering"]["status"], checks["slurmctld answering"]["found"])
        assert "start slurmctld" in checks["slurmctld answering"]["fix"]

    def test_munge_failure_is_named(self, tmp_path: Path, standins: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
        """scontrol reports slurmctld DOWN when munge fails here: doctor says the cause."""
        _standin(standins, "scontrol",
                 "echo 'scontrol: error: Munge encode failed: Failed to access "
                 "\"/run/munge/munge.socket.2\": No such file or directory "
                 "(Did you start munged?)' >&2\n"
                 f"printf '%s' '{PING_DOWN}'; exit 1")
        _, checks, _ = _doctor(tmp_path, _site(tmp_path), capsys)
        ctld = checks["slurmctld answering"]
        assert ctld["found"].startswith("Slurmctld(primary) at ctl is DOWN: this host "
                                        "cannot authenticate to it (Munge encode failed")
        assert "munged" in ctld["fix"]


class TestCauses:
    def test_munged_not_running(self, tmp_path: Path, standins: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
        _standin(standins, "munge", f"echo '{MUNGED_DOWN}' >&2; exit 6")
        code, checks, _ = _doctor(tmp_path, _site(tmp_path), capsys)
        assert 1 == code
        assert ("failed", f"munged is not running: {MUNGED_DOWN}") == (
            checks["munge"]["status"], checks["munge"]["found"])
        assert "start munged" in checks["munge"]["fix"]

    def test_munge_not_installed(self, tmp_path: Path, standins: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
        (standins / "munge").unlink()
        _, checks, _ = _doctor(tmp_path, _site(tmp_path), capsys)
        assert ("failed", "munge: not installed on this node") == (
            checks["munge"]["status"], checks["munge"]["found"])

    def test_oci_conf_missing(self, tmp_path: Path, standins: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
        conf = _site(tmp_path)
        (conf.parent / "oci.conf").unlink()
        code, checks, _ = _doctor(tmp_path, conf, capsys)
        assert 1 == code
        assert ("failed", f"not found: {conf.parent / 'oci.conf'} (it is read beside "
                          f"{conf}, the slurm.conf in use; name another slurm.conf with -f "
                          "or SLURM_CONF)") == (checks["oci.conf"]["status"],
                                                checks["oci.conf"]["found"])
        assert "skipped" == checks["OCI runtime"]["status"]

    @pytest.mark.parametrize("runtime", ["crun", "runc"])
    def test_runtime_missing_on_this_node(self, tmp_path: Path, standins: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          runtime: str) -> None:
        code, checks, _ = _doctor(tmp_path, _site(tmp_path, runtime), capsys)
        assert 1 == code
        assert ("failed", f"{runtime}: not installed on this node (not on PATH)") == (
            checks["OCI runtime"]["status"], checks["OCI runtime"]["found"])

    def test_working_standins(self, tmp_path: Path, standins: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
        """With every stand-in answering and the runtime on PATH: the Slurm, munge and
        runtime checks pass (the stand-ins are as good as a working machine)."""
        _standin(standins, "crun", "exit 0")
        _, checks, _ = _doctor(tmp_path, _site(tmp_path), capsys)
        for name in ("slurm.conf", "Slurm client commands", "slurmctld answering", "munge",
                     "oci.conf", "OCI runtime", "unprivileged user namespaces"):
            assert "ok" == checks[name]["status"], checks[name]


def test_nothing_answers(tmp_path: Path, standins: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    """Every command doctor runs hangs: doctor still ends (its commands share one
    deadline of 4 s; it took 15 s per command) and names each one that did not answer."""
    sleep = shutil.which("sleep", path="/usr/bin:/bin") or "/bin/sleep"
    for name in STANDINS:
        _standin(standins, name, f"exec {sleep} 60")
    code, checks, elapsed = _doctor(tmp_path, _site(tmp_path), capsys)
    assert elapsed < HANG_GUARD_S
    assert 1 == code
    for name, said in (("Slurm client commands", "srun --version: no answer"),
                       ("slurmctld answering", "scontrol ping: no answer"),
                       ("munge", "munged does not answer: munge -n: no answer"),
                       ("unprivileged user namespaces", "unshare --user: no answer")):
        assert ("failed", True) == (checks[name]["status"],
                                    checks[name]["found"].startswith(said)), checks[name]
