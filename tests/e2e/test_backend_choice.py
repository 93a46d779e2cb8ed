"""SCRUN_PY_SLURM_BACKEND on the real cluster: doctor says which backend and why, a bad
value is one line, and the same containers run the same way on the CLI backend and on the
pyslurm backend (where pyslurm is installed for the release under test)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Env, leftovers, scontrol_job

pytestmark = pytest.mark.e2e
VAR = "SCRUN_PY_SLURM_BACKEND"
CHOSEN = "slurm backend chosen"
FALLBACK = "pyslurm call failed, using the Slurm command instead"


def pyslurm_expected() -> bool:
    return os.environ.get("SCRUN_TEST_PYSLURM") == "1"


def doctor(env: Env, value: str | None) -> tuple[int, dict[str, str]]:
    extra = {} if value is None else {VAR: value}
    user_env = {k: v for k, v in env.user.env().items() if k != VAR}
    res = subprocess.run(env.cmd("doctor", "--json", log=False), env={**user_env, **extra},
                         capture_output=True, text=True, timeout=180)
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    return res.returncode, checks["Slurm backend"]


class TestDoctor:
    def test_cli(self, user_env: Env) -> None:
        _, check = doctor(user_env, "cli")
        assert ("ok", f"cli ({VAR}=cli)") == (check["status"], check["found"])

    def test_auto(self, user_env: Env) -> None:
        _, check = doctor(user_env, None)
        assert "ok" == check["status"]
        if pyslurm_expected():
            assert check["found"].startswith("pyslurm (auto: pyslurm "), check
            assert " matches slurmctld " in check["found"]
        else:
            assert check["found"].startswith("cli (auto: "), check

    def test_bad_value(self, user_env: Env) -> None:
        rc, check = doctor(user_env, "c-api")
        assert (1, "failed") == (rc, check["status"])
        assert f"{VAR}='c-api': not one of auto, cli, pyslurm" == check["found"]


class TestCreate:
    def test_bad_value_is_one_line(self, user_env: Env) -> None:
        bundle = user_env.bundle(["true"])
        created = user_env.create("bad", bundle, env=user_env.user.env(**{VAR: "c-api"}))
        assert 1 == created.rc
        err = created.stderr()
        assert "Traceback" not in err
        assert [f"scrun-py: {VAR}='c-api': not one of auto, cli, pyslurm"] == \
            err.strip().splitlines()
        assert any(f"{VAR}='c-api'" in str(r["msg"]) for r in user_env.errors())


def broken_pyslurm(env: Env) -> dict[str, str]:
    """The user's environment with a pyslurm first on the path that is built for the
    cluster's release (its metadata says so, whatever pyslurm the venv holds) and fails
    to import, as one whose libslurm is gone does."""
    pkg = env.work / "broken" / "pyslurm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        'raise ImportError("libslurm.so.43: cannot open shared object file")\n')
    meta = env.work / "broken" / f"pyslurm-{os.environ['SCRUN_TEST_SLURM']}.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: pyslurm\nVersion: {os.environ['SCRUN_TEST_SLURM']}.0\n")
    env.chown(env.work / "broken")
    return {"PYTHONPATH": str(env.work / "broken")}


class TestPyslurmThatDoesNotLoad:
    WHY = ("pyslurm does not load: ImportError: libslurm.so.43: cannot open shared "
           "object file")

    def test_forced_is_one_line(self, user_env: Env) -> None:
        environ = user_env.user.env(**{VAR: "pyslurm"}, **broken_pyslurm(user_env))
        created = user_env.create("fb", user_env.bundle(["true"]), env=environ)
        assert 1 == created.rc
        assert [f"scrun-py: {VAR}=pyslurm: {self.WHY}"] == created.stderr().splitlines()

    def test_auto_runs_on_the_cli(self, user_env: Env) -> None:
        environ = user_env.user.env(**{VAR: "auto"}, **broken_pyslurm(user_env))
        created = user_env.create("fa", user_env.bundle(["true"]), env=environ)
        assert 0 == created.rc, created.stderr()
        assert 0 == subprocess.run(user_env.cmd("start", "fa"), env=environ,
                                   capture_output=True, timeout=120).returncode
        assert 0 == created.wait_exit()
        chosen = [(r.get("backend"), r.get("reason")) for r in user_env.log_records()
                  if r.get("msg") == CHOSEN]
        assert [("cli", f"auto: {self.WHY}")] == chosen


def _run_case(env: Env, backend: str, cid: str, conf: Path | None, args: list[str],
              kill: str | None) -> dict[str, object]:
    """One container on `backend`: what an engine and Slurm see of it."""
    environ = env.user.env(**{VAR: backend})
    bundle = env.bundle(args, name=f"b-{cid}", pid_ns=False)
    created = env.create(cid, bundle, env=environ, conf=conf)
    assert 0 == created.rc, created.stderr()
    job = created.job_id()
    assert 0 == subprocess.run(env.cmd("start", cid, conf=conf), env=environ,
                               capture_output=True, timeout=120).returncode
    if kill:
        deadline = time.monotonic() + 60
        while env.state(cid)["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        res = subprocess.run(env.cmd("kill", cid, kill, conf=conf), env=environ,
                             capture_output=True, text=True, timeout=120)
        assert 0 == res.returncode, res.stderr
    code = created.wait_exit(timeout=120)
    state = env.state(cid)["status"]
    assert 0 == subprocess.run(env.cmd("delete", cid, conf=conf), env=environ,
                               capture_output=True, timeout=120).returncode
    fields = scontrol_job(job)
    records = [r for r in env.log_records() if r.get("container_id") == cid]
    chosen = [r.get("backend") for r in records if r.get("msg") == CHOSEN]
    fallbacks = [r for r in records if r.get("msg") == FALLBACK]
    assert [backend] == chosen, records
    assert [] == fallbacks
    assert [] == leftovers(env, cid, [job])
    return {"exit": code, "state": state, "job_state": fields["JobState"],
            "job_exit": fields["ExitCode"]}


def on_pyslurm(env: Env, cid: str, conf: Path | None, args: list[str],
               kill: str | None) -> dict[str, object]:
    """The case on the pyslurm backend; a skip where the release has no pyslurm (the
    caller has asserted the CLI backend's result before)."""
    if not pyslurm_expected():
        pytest.skip(f"no pyslurm for Slurm {os.environ.get('SCRUN_TEST_SLURM', '')} "
                    "(scripts/pyslurm.sh): the CLI backend's result was checked")
    return _run_case(env, "pyslurm", cid, conf, args, kill)


class TestSameOnBothBackends:
    """The CLI backend's result is checked on every release, and is the reference: the
    pyslurm backend must give the same (and its anchors must have used pyslurm without a
    fallback) where the release has pyslurm.  The signal through Slurm (no usable
    RunTimeKill; run mode needs one in oci.conf) is checked at the backend in
    tests/e2e/test_backend_contract.py."""

    def test_exit_code(self, user_env: Env) -> None:
        cli = _run_case(user_env, "cli", "xc", None, ["sh", "-c", "exit 3"], None)
        assert {"exit": 3, "state": "stopped", "job_state": "FAILED", "job_exit": "3:0"} == cli
        assert cli == on_pyslurm(user_env, "xp", None, ["sh", "-c", "exit 3"], None)

    def test_kill_through_the_runtime(self, user_env: Env) -> None:
        cli = _run_case(user_env, "cli", "kc", None, ["sleep", "300"], "TERM")
        assert 143 == cli["exit"]
        assert cli == on_pyslurm(user_env, "kp", None, ["sleep", "300"], "TERM")
