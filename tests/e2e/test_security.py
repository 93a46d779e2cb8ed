"""Security: other users are refused, files are private, the pid file is not a symlink
trap, config.json's environment does not steer scrun-py, Lua paths are checked."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    SCRUN,
    VENV,
    Created,
    Env,
    other_user,
    scontrol_job,
    traces,
)

pytestmark = pytest.mark.e2e



def _as_other(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    other = other_user()
    argv = other.argv([str(SCRUN), "--root", str(env.root), *args])
    return subprocess.run(argv, env=other.env(), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _created(env: Env, cid: str) -> Created:
    created = env.create(cid, env.bundle(["sh", "-c", "echo ran; exit 6"]))
    assert 0 == created.rc, created.stderr()
    return created


def _finish(env: Env, created: Created) -> None:
    """The container still works for its owner after the attempts."""
    assert "created" == env.state(created.cid)["status"]
    assert 0 == env.run("start", created.cid).returncode
    assert 6 == created.wait_exit()
    assert "ran\n" == created.stdout()
    assert 0 == env.run("delete", created.cid).returncode
    assert [] == traces(env, created.cid)


ATTEMPTS = [["state", "x"], ["start", "x"], ["kill", "x", "KILL"], ["delete", "x"],
            ["delete", "--force", "x"]]


class TestOtherUser:
    @pytest.mark.case("S-01")
    def test_other_user_refused(self, user_env: Env) -> None:
        """scruntest2 on scruntest's container (same --root): permission denied."""
        env = user_env
        created = _created(env, "x")
        for args in ATTEMPTS:
            res = _as_other(env, *args)
            assert 0 != res.returncode, args
            assert 1 == len(res.stderr.splitlines()), res.stderr
            assert "permission denied" in res.stderr, (args, res.stderr)
        _finish(env, created)

    @pytest.mark.case("S-02")
    def test_socket_checks_peer_uid(self, user_env: Env) -> None:
        """Even when the owner opens the modes, scruntest2's verbs refuse a root that is
        not theirs, and a client of their own that talks to the socket directly is
        refused by the anchor (SO_PEERCRED): the container still runs for its owner."""
        env = user_env
        created = _created(env, "x")
        cdir = env.root / "x"
        for path, mode in ((env.root, 0o755), (cdir, 0o755), (cdir / "state.json", 0o644),
                           (cdir / "anchor.sock", 0o666)):
            os.chmod(path, mode)
        for args in ATTEMPTS:
            res = _as_other(env, *args)
            assert 0 != res.returncode, args
            assert 1 == len(res.stderr.splitlines()), res.stderr
            assert (f"root directory {env.root} belongs to uid {env.user.uid}, not to uid "
                    f"{other_user().uid}: refusing it") in res.stderr, (args, res.stderr)
        other = other_user()
        raw = ("import socket,sys\n"
               "s=socket.socket(socket.AF_UNIX)\n"
               "s.connect(sys.argv[1])\n"
               "s.sendall(b'{\"v\":1,\"type\":\"kill\",\"signal\":9}\\n')\n"
               "print(s.recv(4096).decode())\n")
        python = str(VENV / "bin" / "python")
        res = subprocess.run(other.argv([python, "-c", raw, str(cdir / "anchor.sock")]),
                             env=other.env(), capture_output=True, text=True, timeout=60)
        assert 0 == res.returncode, res.stderr
        reply = json.loads(res.stdout)
        assert (False, "permission denied: container belongs to another user") == (
            reply["ok"], reply["message"])
        os.chmod(env.root, 0o700)
        os.chmod(cdir, 0o700)
        os.chmod(cdir / "state.json", 0o600)
        _finish(env, created)


class TestFiles:
    @pytest.mark.case("S-03")
    def test_modes(self, env: Env) -> None:
        """--root and the spool dir are 0700, the socket 0600, all owned by the user."""
        created = _created(env, "m")
        cdir = env.root / "m"
        for path, mode in ((env.root, 0o700), (cdir, 0o700), (cdir / "anchor.sock", 0o600),
                           (cdir / "state.json", 0o600)):
            st = os.lstat(path)
            assert (oct(mode), env.user.uid) == (oct(stat.S_IMODE(st.st_mode)), st.st_uid), \
                path
        _finish(env, created)

    @pytest.mark.case("S-04")
    def test_pid_file_symlink_not_followed(self, env: Env) -> None:
        """A symlink planted at the --pid-file path is replaced, its target untouched."""
        target = env.work / "precious"
        target.write_text("precious")
        env.chown(target)
        (env.work / "p.pid").symlink_to(target)
        created = _created(env, "p")
        assert not (env.work / "p.pid").is_symlink()
        assert str(created.pid) == (env.work / "p.pid").read_text()
        assert "precious" == target.read_text()
        _finish(env, created)
        assert "precious" == target.read_text()


class TestEnvironment:
    @pytest.mark.case("S-05")
    def test_container_env_does_not_steer_scrun(self, env: Env) -> None:
        """PATH and LD_PRELOAD in process.env reach the container, not scrun-py: with
        PATH imported, salloc would not be found."""
        bundle = env.bundle(["/bin/sh", "-c", 'echo "$PATH $LD_PRELOAD"'])
        cfg = bundle.config()
        cfg["process"]["env"] = ["PATH=/nonexistent",  # type: ignore[index]
                                 "LD_PRELOAD=/nonexistent.so"]
        bundle.config_file.write_text(json.dumps(cfg))
        created = env.create("e", bundle)
        assert 0 == created.rc, created.stderr()
        with open(f"/proc/{created.pid}/environ", "rb") as fh:
            anchor_env = fh.read().split(b"\0")
        assert b"PATH=/nonexistent" not in anchor_env
        assert not [v for v in anchor_env if v.startswith(b"LD_PRELOAD=")]
        assert 0 == env.run("start", "e").returncode
        assert 0 == created.wait_exit()
        assert "/nonexistent /nonexistent.so" in created.stdout()
        assert 0 == env.run("delete", "e").returncode
        assert [] == traces(env, "e")

    @pytest.mark.case("S-06")
    def test_scrun_vars_imported(self, env: Env) -> None:
        """SCRUN_TIMELIMIT in process.env is honoured (the job gets that limit)."""
        created = env.create("t", env.bundle(["true"], env=["SCRUN_TIMELIMIT=7"]))
        assert 0 == created.rc, created.stderr()
        assert "00:07:00" == scontrol_job(created.job_id())["TimeLimit"]
        assert 0 == env.run("start", "t").returncode
        assert 0 == created.wait_exit()
        assert 0 == env.run("delete", "t").returncode
        assert [] == traces(env, "t")


    @pytest.mark.case("S-08")
    def test_caller_directory_is_not_imported(self, env: Env) -> None:
        """The anchor is a new interpreter started by create in the caller's directory:
        a scrun_py package there must not be what it imports (as root under root
        podman, that would run the caller's code as root)."""
        plant = env.work / "plant"
        marker = env.work / "planted-code-ran"
        (plant / "scrun_py" / "anchor").mkdir(parents=True)
        (plant / "scrun_py" / "__init__.py").write_text("")
        (plant / "scrun_py" / "anchor" / "__init__.py").write_text("")
        (plant / "scrun_py" / "anchor" / "__main__.py").write_text(
            f"open({str(marker)!r}, 'w').write('ran')\n")
        env.chown(plant)
        bundle = env.bundle(["true"])
        out, err = env.work / "pl.out", env.work / "pl.err"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            rc = subprocess.run(
                env.cmd("create", "--bundle", str(bundle.path), "--pid-file",
                        str(env.work / "pl.pid"), "pl"),
                env=env.user.env(), cwd=plant, stdin=subprocess.DEVNULL, stdout=fo,
                stderr=fe, timeout=120).returncode
        assert 0 == rc, err.read_text()
        created = Created(env, "pl", rc, out, err, env.work / "pl.pid",
                          int((env.work / "pl.pid").read_text()))
        env.anchors.append(created.pid)
        assert not marker.exists()
        assert 0 == env.run("start", "pl").returncode
        assert 0 == created.wait_exit()
        assert 0 == env.run("delete", "pl").returncode
        assert not marker.exists()
        assert [] == traces(env, "pl")


class TestLuaPaths:
    @pytest.mark.case("S-07")
    @pytest.mark.parametrize("value", ['"relative/bundle"', "42", '"/tmp/a\\0b"', '""'])
    def test_set_bundle_path_checked(self, env: Env, conf_dir: Path, value: str) -> None:
        """slurm.set_bundle_path with a relative path, a number, an embedded NUL or an
        empty string raises a Lua error that fails create with a clear message."""
        (conf_dir / "scrun.lua").write_text(
            "function slurm_scrun_stage_in(id, bundle, ...)\n"
            f"  slurm.set_bundle_path({value})\n  return slurm.SUCCESS\nend\n"
            "function slurm_scrun_stage_out(...) return slurm.SUCCESS end\n"
            "return slurm.SUCCESS\n")
        t0 = time.monotonic()
        res = subprocess.run(
            env.cmd("create", "--bundle", str(env.bundle(["true"]).path), "--pid-file",
                    str(env.work / "l.pid"), "l", conf=conf_dir / "slurm.conf"),
            env=env.user.env(), cwd=env.work, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL)
        assert 0 != res.returncode
        lines = res.stderr.splitlines()
        assert 1 == len(lines), res.stderr
        assert "set_bundle_path" in lines[0]
        assert "absolute path" in lines[0]
        assert "set_bundle_path" in str(env.errors()[-1]["msg"])
        assert time.monotonic() - t0 < 60
        assert [] == traces(env, "l")
