"""A shared login node: another local user, an image's ENV or a caller's own
flags play the attacker against scruntest's containers, Slurm and the site's settings.

Each refusal has a control beside it, the same attempt where the site allows it or the
hole is open, which shows the attempt would have had its effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    SCRUN,
    VENV,
    Env,
    User,
    _make_env,
    leftovers,
    other_user,
    slurm_env,
    squeue,
    traces,
)

pytestmark = pytest.mark.e2e



@pytest.fixture
def other_env(cluster: Path) -> Iterator[Env]:
    """The second test user's own world (for a user who bypasses the site's settings)."""
    yield from _make_env(other_user())


def _as(user: User, argv: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run argv as `user`; stdout and stderr through files, not pipes: the anchor a
    create starts keeps create's stdio open until the container has stopped."""
    out, err = cwd / ".as.out", cwd / ".as.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.run(user.argv(argv), env=user.env(**extra), cwd=cwd, stdout=fo,
                              stderr=fe, timeout=120, stdin=subprocess.DEVNULL, check=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(),
                                       err.read_text())


# -- 1. --root in a shared directory ------------------------------------------------------


class TestRootMadeFirst:
    @pytest.mark.case("S-09")
    @pytest.mark.parametrize("mode", [0o777, 0o1777, 0o755])
    def test_root_made_by_another_user(self, user_env: Env, mode: int) -> None:
        """scruntest2 makes scruntest's root first in a shared sticky directory (the /tmp
        fallback of the default --root): create refuses it with one line naming the
        owner; no job, nothing in the other user's directory."""
        env = user_env
        shared = env.work / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        root = shared / f"scrun-{env.user.uid}"
        res = _as(other_user(), ["mkdir", "-m", f"{mode:o}", str(root)], env.work)
        assert 0 == res.returncode, res.stderr
        res = _as(env.user, [str(SCRUN), "--root", str(root), "--log", str(env.log),
                             "--log-format", "json", "create", "--bundle",
                             str(env.bundle(["true"]).path), "v"], env.work)
        assert 1 == res.returncode
        lines = res.stderr.splitlines()
        assert 1 == len(lines), res.stderr
        assert (f"root directory {root} belongs to uid {other_user().uid}, not to uid "
                f"{env.user.uid}: refusing it") in lines[0]
        assert "refusing it" in str(env.errors()[-1]["msg"])
        assert [] == list(root.iterdir())
        assert [] == traces(env)

    @pytest.mark.case("S-10")
    def test_own_root_writable_by_others(self, user_env: Env) -> None:
        """The caller's own --root that others can write (where another user could rename
        or plant container directories) is refused; at 0700 the same create works."""
        env = user_env
        env.root.mkdir()
        env.chown(env.root)
        os.chmod(env.root, 0o777)
        bundle = env.bundle(["true"])
        created = env.create("w", bundle)
        assert 1 == created.rc
        assert f"root directory {env.root} is writable by other users (mode 0777): " \
               "refusing it" in created.stderr()
        assert [] == list(env.root.iterdir())
        os.chmod(env.root, 0o700)
        created = env.create("w", bundle)
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "w").returncode
        assert 0 == created.wait_exit()
        assert 0 == env.run("delete", "w").returncode
        assert [] == traces(env, "w")


# -- 2. an image's ENV and Slurm's commands on the login node -----------------------------


def _program(env: Env, name: str) -> tuple[str, Path]:
    """A program that leaves a marker when something runs it."""
    marker = env.work / f"ran-{name}"
    script = env.work / f"prog-{name}.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    env.chown(script)
    return str(script), marker


# variable -> what the image's value does when it reaches Slurm's commands
REFUSED = ("SLURM_CONF", "SLURM_JOB_ID", "SCRUN_PROLOG", "SLURM_PROLOG", "SCRUN_TASK_PROLOG",
           "SLURM_TASK_PROLOG")


class TestImageEnvironment:
    @pytest.mark.case("S-11")
    @pytest.mark.parametrize("name", REFUSED)
    def test_refused_variable(self, user_env: Env, conf_dir: Path, name: str) -> None:
        """An image's ENV (or `docker run -e`) entry that would choose Slurm's
        configuration, the job to run in, or a program Slurm runs outside the container
        does not reach salloc/srun: a new job runs the container, the program never
        runs, a warning in --log names the variable, config.json keeps it.  The
        control: the same bundle where the site's [trust] container_env allows the
        variable has its effect."""
        env = user_env
        conf = conf_dir / "slurm.conf"
        outer = 0
        if name == "SLURM_JOB_ID":
            holder = subprocess.run(
                env.user.argv(["salloc", "--no-shell", "--job-name=outer", "--time=5"]),
                env=env.user.env(), capture_output=True, text=True, timeout=60, cwd=env.work)
            outer = int(holder.stderr.split("Granted job allocation")[1].split()[0])
            value, marker = str(outer), None
        elif name == "SLURM_CONF":
            value, marker = str(env.work / "nonexistent" / "slurm.conf"), None
        else:
            value, marker = _program(env, name)
        try:
            for allowed in (False, True):
                if allowed:
                    (conf_dir / "scrun-py.toml").write_text(
                        f'[trust]\ncontainer_env = ["{name}"]\n')
                cid = f"img{int(allowed)}"
                bundle = env.bundle(["true"], env=[f"{name}={value}"], name=f"bundle-{cid}")
                created = env.create(cid, bundle, conf=conf)
                if allowed and name == "SLURM_CONF":
                    assert 0 != created.rc  # salloc read the image's (missing) slurm.conf
                    assert [] == traces(env, cid)
                    continue
                assert 0 == created.rc, created.stderr()
                job = created.job_id()
                assert 0 == env.run("start", cid, conf=conf).returncode
                assert 0 == created.wait_exit()
                assert 0 == env.run("delete", cid, conf=conf).returncode
                if not allowed:
                    assert f"{name}={value}" in bundle.config()["process"]["env"]  # type: ignore[index]
                    assert job != outer
                    warnings = [r for r in env.log_records() if r.get("variable") == name]
                    assert 1 == len(warnings), env.log_records()
                    assert "not used by scrun-py or Slurm" in str(warnings[0]["msg"])
                    if marker is not None:
                        time.sleep(1)
                        assert not marker.exists(), f"{name} ran {value}"
                elif marker is not None:
                    assert marker.exists(), f"control: {name} did not run {value}"
                else:
                    assert outer == job  # control: attached to the image's job
                assert [] == leftovers(env, cid, [job] if job != outer else [])
        finally:
            if outer:
                subprocess.run(["scancel", str(outer)], env=slurm_env(), check=False)
        if outer:
            assert "" == squeue("-j", str(outer), "-h", "-o", "%T", "-t", "R").strip()


# -- 4. the site's own files against a caller's -f, SLURM_CONF and SCRUN_PY_LUA ----------

# scrun-py with another directory standing for the system's slurm.conf directory: the
# tests cannot write /etc/slurm on a machine that other test sessions share.
WRAPPER = ("import sys; from scrun_py.base import layout; "
           "layout.DEFAULT_SLURM_CONF = sys.argv.pop(1) + '/slurm.conf'; "
           "from scrun_py.entry import main; main()")


def _system_run(env: Env, system: Path, *args: str, conf: Path,
                **extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(VENV / "bin" / "python"), "-P", "-c", WRAPPER, str(system),
            "--root", str(env.root), "--log", str(env.log), "--log-format", "json",
            "-f", str(conf), *args]
    return _as(env.user, argv, env.work, **extra)


def _lifecycle(env: Env, system: Path, cid: str, bundle: Path, conf: Path,
               **extra: str) -> subprocess.CompletedProcess[str]:
    """create (its result), then start, wait and delete when it worked."""
    res = _system_run(env, system, "create", "--bundle", str(bundle), "--pid-file",
                      str(env.work / f"{cid}.pid"), cid, conf=conf, **extra)
    if res.returncode == 0:
        pid = int((env.work / f"{cid}.pid").read_text())
        env.anchors.append(pid)
        assert 0 == _system_run(env, system, "start", cid, conf=conf).returncode
        from tests.e2e.conftest import wait_anchor

        wait_anchor(pid)
        assert 0 == _system_run(env, system, "delete", cid, conf=conf).returncode
    return res


@pytest.fixture
def system_dir(conf_dir: Path) -> Path:
    """The site's directory: the cluster's slurm.conf and oci.conf, the site's file."""
    return conf_dir


class TestSiteFiles:
    @pytest.mark.case("S-12")
    def test_own_slurm_conf_does_not_escape_the_policy(self, other_env: Env,
                                                      system_dir: Path) -> None:
        """A user who copies slurm.conf into a directory of their own (with no
        scrun-py.toml, or one without a policy) and passes -f there escapes the site's
        policy, unless the system's file says site_files = "system"."""
        env = other_env
        mine = env.work / "myconf"
        mine.mkdir()
        for name in ("slurm.conf", "oci.conf", "cgroup.conf"):
            if (system_dir / name).exists():
                (mine / name).write_bytes((system_dir / name).read_bytes())
        (mine / "scrun-py.toml").write_text("[audit]\nsyslog = false\n")
        env.chown(mine)
        rule = '[policy]\nbundles = ["/nowhere"]\n'
        bundle = env.bundle(["true"]).path
        (system_dir / "scrun-py.toml").write_text(rule)
        res = _lifecycle(env, system_dir, "own", bundle, mine / "slurm.conf")
        assert 0 == res.returncode, res.stderr  # the hole: the policy is not read
        (system_dir / "scrun-py.toml").write_text('[trust]\nsite_files = "system"\n' + rule)
        res = _lifecycle(env, system_dir, "pinned", bundle, mine / "slurm.conf")
        assert 1 == res.returncode
        assert "refused by site policy rule bundles" in res.stderr
        assert [] == traces(env)

    @pytest.mark.case("S-13")
    def test_scrun_py_lua_refused(self, other_env: Env, system_dir: Path) -> None:
        """SCRUN_PY_LUA names a scrun.lua of the caller's instead of the site's; with
        lua_override = false in the system's file, create refuses it in one line before
        anything runs."""
        env = other_env
        marker = env.work / "lua-ran"
        lua = env.work / "mine.lua"
        lua.write_text(f'function slurm_scrun_stage_in(...) io.open("{marker}", "w"):close() '
                       "return slurm.SUCCESS end\n"
                       "function slurm_scrun_stage_out(...) return slurm.SUCCESS end\n"
                       "return slurm.SUCCESS\n")
        env.chown(lua)
        bundle = env.bundle(["true"]).path
        conf = system_dir / "slurm.conf"
        res = _lifecycle(env, system_dir, "lua1", bundle, conf, SCRUN_PY_LUA=str(lua))
        assert 0 == res.returncode, res.stderr
        assert marker.exists()  # control: the caller's script ran
        marker.unlink()
        (system_dir / "scrun-py.toml").write_text("[trust]\nlua_override = false\n")
        res = _lifecycle(env, system_dir, "lua2", bundle, conf, SCRUN_PY_LUA=str(lua))
        assert 1 == res.returncode
        lines = res.stderr.splitlines()
        assert 1 == len(lines), res.stderr
        assert (f"SCRUN_PY_LUA is not allowed here: {system_dir / 'scrun-py.toml'} sets "
                "[trust] lua_override = false") in lines[0]
        assert not marker.exists()
        doctor = _system_run(env, system_dir, "doctor", conf=conf, SCRUN_PY_LUA=str(lua))
        assert 0 != doctor.returncode
        assert "SCRUN_PY_LUA is not allowed here" in doctor.stdout, doctor.stdout
        assert "SCRUN_PY_LUA refused" in doctor.stdout, doctor.stdout
        assert [] == traces(env)


# -- 3. the audit trail under a user namespace (what rootless podman does) ----------------


class TestAuditRealUser:
    @pytest.mark.case("S-14")
    def test_namespace_root_is_audited_as_the_user(self, user_env: Env,
                                                   conf_dir: Path) -> None:
        """scruntest runs scrun-py as root of a user namespace of its own (rootless
        podman's situation, `unshare --map-root-user`): every record names scruntest and
        its real uid, none names root; the user's file ({user}) is theirs."""
        env = user_env
        logdir = env.work / "audit"
        logdir.mkdir()
        os.chmod(logdir, 0o1733)
        (conf_dir / "scrun-py.toml").write_text(
            f'[audit]\nfile = "{logdir}/{{user}}.jsonl"\nsyslog = false\n')
        conf = conf_dir / "slurm.conf"
        bundle = env.bundle(["true"])
        ns = ["unshare", "--user", "--map-root-user", "--"]
        base = [str(SCRUN), "--root", str(env.root), "-f", str(conf)]
        res = _as(env.user, [*ns, *base, "create", "--bundle", str(bundle.path),
                             "--pid-file", str(env.work / "ns.pid"), "ns"], env.work)
        assert 0 == res.returncode, res.stderr
        pid = int((env.work / "ns.pid").read_text())
        env.anchors.append(pid)
        assert 0 == _as(env.user, [*ns, *base, "start", "ns"], env.work).returncode
        from tests.e2e.conftest import wait_anchor

        assert 0 == wait_anchor(pid)
        assert 0 == _as(env.user, [*ns, *base, "delete", "ns"], env.work).returncode
        path = logdir / f"{env.user.name}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert {"create", "start", "exit", "delete"} <= {r["event"] for r in records}
        assert {(env.user.name, env.user.uid)} == {(r["user"], r["uid"]) for r in records}
        assert env.user.uid == path.stat().st_uid
        assert not (logdir / "root.jsonl").exists()
        assert [] == traces(env, "ns")
