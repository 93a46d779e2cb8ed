"""What each Slurm release gives a container, used and checked on the release under test.

* From 23.02 the step gets `srun --container-id`, and the container its task's
  environment (SLURM_PROCID, SLURM_NODEID, SLURM_LOCALID) and SLURM_CONTAINER_ID.
  22.05 gives the container the step's environment only.
* From 23.02 oci.conf knows EnvExclude, RunTimeEnvExclude and the %U token (the user's
  numeric id); 22.05's slurmstepd refuses such an oci.conf, which `doctor` reports.
* From 23.02 slurmstepd runs config.json's root.path; 22.05 runs BUNDLE/rootfs whatever it
  says, so scrun-py's `start` refuses another root.path there
  (tests/e2e/test_oci_clauses.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrun_py.slurm.releases import has, release_name
from tests.e2e.conftest import STATE, Bundle, Created, Env, leftovers, slurm_release

pytestmark = pytest.mark.e2e

TASK_VARS = ("SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID")
# oci.conf of the newer releases: %U in the runtime's state dir, and both env filters
NEWER_OCI_CONF = """\
EnvExclude="^(SLURM_CONF|SLURM_CLUSTER_NAME)="
RunTimeEnvExclude="^SCRUN_RELEASE_TEST="
RunTimeQuery="crun --rootless=true --root=/tmp/ocistate-u%U state %n.%u.%j.%s.%t"
RunTimeKill="crun --rootless=true --root=/tmp/ocistate-u%U kill %n.%u.%j.%s.%t"
RunTimeDelete="crun --rootless=true --root=/tmp/ocistate-u%U delete --force %n.%u.%j.%s.%t"
RunTimeRun="exec crun --rootless=true --root=/tmp/ocistate-u%U run --bundle %b %n.%u.%j.%s.%t"
"""


# create/start mode with the runtime given the task's stdio: the create command's parent
# is the task (its stdin, stdout and stderr are the step's), so slurmstepd's pipe from the
# create command closes when it exits and the container writes where a run-mode one would
_CS = "crun --rootless=true --root=/tmp/ocistate-cs%u"
_CS_ID = "%n.%u.%j.%s.%t"
CREATE_START_OCI_CONF = (
    f'RunTimeQuery="{_CS} state {_CS_ID}"\n'
    f'RunTimeKill="{_CS} kill {_CS_ID}"\n'
    f'RunTimeDelete="{_CS} delete --force {_CS_ID}"\n'
    f'RunTimeCreate="exec {_CS} create --bundle %b {_CS_ID}'
    ' </proc/$PPID/fd/0 >/proc/$PPID/fd/1 2>/proc/$PPID/fd/2"\n'
    f'RunTimeStart="{_CS} start {_CS_ID}"\n')


def _env_of(out: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {k: v for k, v in pairs}


def _run(env: Env, cid: str, args: list[str]) -> tuple[int, str, int]:
    """(exit code, stdout, job id) of one container run to its end."""
    created = env.create(cid, env.bundle(args, name=cid))
    assert 0 == created.rc, created.stderr()
    job = created.job_id()
    assert 0 == env.run("start", cid).returncode
    rc = created.wait_exit()
    assert 0 == env.run("delete", cid).returncode
    assert [] == leftovers(env, cid, [job])
    return rc, created.stdout(), job


class TestContainerEnvironment:
    def test_what_the_release_gives_the_container(self, env: Env) -> None:
        rc, out, job = _run(env, "relenv", ["env"])
        assert 0 == rc
        seen = _env_of(out)
        assert str(job) == seen["SLURM_JOB_ID"]
        assert "SLURM_STEP_ID" in seen
        assert str(env.work / "relenv") == seen["SLURM_CONTAINER"]
        release = slurm_release()
        if has(release, "--container-id"):
            assert "relenv" == seen["SLURM_CONTAINER_ID"]
        else:
            assert "SLURM_CONTAINER_ID" not in seen
        if has(release, "task environment"):
            assert ("0", "0", "0") == tuple(seen[v] for v in TASK_VARS)
        else:  # the container gets the step's variables only
            assert not [v for v in TASK_VARS if v in seen]


def _started(env: Env, cid: str, bundle: Bundle) -> tuple[Created, int]:
    """`create` and `start` of a container that prints "started", once it has."""
    created = env.create(cid, bundle)
    assert 0 == created.rc, created.stderr()
    job = created.job_id()
    assert 0 == env.run("start", cid).returncode
    deadline = time.monotonic() + 60
    while "started" not in created.stdout():
        assert time.monotonic() < deadline, created.stderr()
        time.sleep(0.1)
    return created, job


def _doctor(env: Env, conf: Path) -> tuple[int, dict[str, dict[str, str]]]:
    res = subprocess.run(env.cmd("doctor", "--json", conf=conf / "slurm.conf", log=False),
                         env=env.user.env(), capture_output=True, text=True, timeout=120)
    return res.returncode, {c["name"]: c for c in json.loads(res.stdout)}


class TestDoctor:
    def test_reports_the_release_and_what_it_offers(self, user_env: Env,
                                                    conf_dir: Path) -> None:
        release = slurm_release()
        _, checks = _doctor(user_env, conf_dir)
        row = checks["Slurm release"]
        assert row["found"].startswith(release_name(release) + ":")
        for name in ("--container-id", "task environment", "EnvExclude", "root.path"):
            listed_missing = name in row["found"].partition("not on this release:")[2]
            assert listed_missing != has(release, name), row

    def test_create_start_mode_is_a_warning(self, user_env: Env, conf_dir: Path) -> None:
        """RunTimeCreate/RunTimeStart: the step never ends with runc 1.1 or crun 1.8
        (slurmstepd waits for the end of RunTimeCreate's output, which the container
        holds) unless the output goes elsewhere, and then only root's containers run
        and without their exit code (TestCreateStartMode), so doctor warns, on every
        release (22.05 included)."""
        (conf_dir / "oci.conf").write_text(
            'RunTimeQuery="runc --root=/tmp/runc-%u state %n.%u.%j.%s.%t"\n'
            'RunTimeKill="runc --root=/tmp/runc-%u kill %n.%u.%j.%s.%t"\n'
            'RunTimeDelete="runc --root=/tmp/runc-%u delete --force %n.%u.%j.%s.%t"\n'
            'RunTimeCreate="runc --root=/tmp/runc-%u create --bundle %b %n.%u.%j.%s.%t"\n'
            'RunTimeStart="runc --root=/tmp/runc-%u start %n.%u.%j.%s.%t"\n')
        _, checks = _doctor(user_env, conf_dir)
        row = checks["oci.conf"]
        assert "warning" == row["status"], row
        assert "create" in (row["found"] + row["fix"]).lower()


@contextlib.contextmanager
def _cluster_oci_conf(text: str) -> Iterator[None]:
    """The cluster's oci.conf replaced by `text` (slurmstepd reads it at every step),
    under a lock, and put back whatever happens."""
    conf = STATE / "oci.conf"
    saved = conf.read_text()

    def write(content: str) -> None:
        tmp = conf.with_suffix(".new")
        tmp.write_text(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, conf)

    with open(STATE / "oci.conf.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            write(text)
            yield
        finally:
            write(saved)


class TestNewerOciConf:
    def test_env_exclude_and_uid_token(self, env: Env, conf_dir: Path) -> None:
        if not has(slurm_release(), "EnvExclude"):
            # slurmstepd of 22.05 refuses these keys: doctor says so before any job runs
            (conf_dir / "oci.conf").write_text(NEWER_OCI_CONF)
            rc, checks = _doctor(env, conf_dir)
            assert 0 != rc
            assert "failed" == checks["oci.conf"]["status"], checks["oci.conf"]
            for word in ("EnvExclude", "RunTimeEnvExclude", "%U"):
                assert word in checks["oci.conf"]["found"]
            return
        with _cluster_oci_conf(NEWER_OCI_CONF):
            self._run_with_newer_conf(env)

    @staticmethod
    def _run_with_newer_conf(env: Env) -> None:
        trap = 'trap "echo TERM; exit 3" TERM; env; echo started; while :; do sleep 0.2; done'
        created, job = _started(env, "newer", env.bundle(["sh", "-c", trap], name="newer",
                                                         env=["SCRUN_RELEASE_TEST=1"]))
        # the runtime's state dir was named with %U: scrun-py's kill expands it the same way
        assert Path(f"/tmp/ocistate-u{env.user.uid}").is_dir()
        assert 0 == env.run("kill", "newer", "TERM").returncode
        assert 3 == created.wait_exit()
        seen = _env_of(created.stdout())
        assert "SLURM_CONF" not in seen and "SLURM_CLUSTER_NAME" not in seen  # EnvExclude
        assert str(job) == seen["SLURM_JOB_ID"]
        assert "TERM" in created.stdout()
        assert 0 == env.run("delete", "newer").returncode
        assert [] == leftovers(env, "newer", [job])


class TestWorkingDirToken:
    def test_percent_z_is_the_jobs_working_directory(self, env: Env, conf_dir: Path) -> None:
        run = next(line for line in (STATE / "oci.conf").read_text().splitlines()
                   if line.startswith("RunTimeRun="))
        conf = (STATE / "oci.conf").read_text().replace(
            run, run.replace('RunTimeRun="', 'RunTimeRun="echo workdir=%Z >&2; ', 1))
        if not has(slurm_release(), "%Z"):
            (conf_dir / "oci.conf").write_text(conf)
            rc, checks = _doctor(env, conf_dir)
            assert 0 != rc
            assert "%Z unknown to slurm" in checks["oci.conf"]["found"], checks["oci.conf"]
            return
        with _cluster_oci_conf(conf):
            created = env.create("zdir", env.bundle(["true"], name="zdir",
                                                    env=["SCRUN_WORKING_DIR=/tmp"]))
            assert 0 == created.rc, created.stderr()
            job = created.job_id()
            assert 0 == env.run("start", "zdir").returncode
            assert 0 == created.wait_exit()
            assert 0 == env.run("delete", "zdir").returncode
        assert "workdir=/tmp\n" in created.stderr()
        assert [] == leftovers(env, "zdir", [job])


class TestCreateStartMode:
    """oci.conf's create/start mode, run for real through scrun-py on the release under test.

    The task's stdio can be handed to the runtime through /proc/$PPID/fd only by root: the
    task process has changed its credentials from slurmstepd's, so the kernel makes it
    non-dumpable and its /proc/PID/fd belongs to root.  For any other user the redirection
    fails, the create command never creates the container, and slurmstepd gives up on it
    ("container never started"): create/start mode cannot run an ordinary user's container
    with its output, and run mode (RunTimeRun) is the one to use."""

    def test_runs_with_the_tasks_stdio_but_loses_the_exit_code(self, env: Env) -> None:
        with _cluster_oci_conf(CREATE_START_OCI_CONF):
            created = env.create("cstart", env.bundle(
                ["sh", "-c", "echo out; echo err >&2; exit 7"], name="cstart"))
            assert 0 == created.rc, created.stderr()
            job = created.job_id()
            assert 0 == env.run("start", "cstart").returncode
            rc = created.wait_exit(timeout=90)
            assert 0 == env.run("delete", "cstart").returncode
        assert [] == leftovers(env, "cstart", [job])
        if env.user.uid != 0:
            assert "" == created.stdout()
            assert "container never started" in created.stderr()
            assert 0 != rc
            return
        assert "out\n" == created.stdout()
        assert "err" in created.stderr()
        # the task's status is RunTimeStart's (0), whatever the container exited with:
        # run mode (RunTimeRun) is the one that gives engines the container's exit code
        assert 0 == rc

    # root only: create/start mode cannot start an ordinary user's container
    # (test_runs_with_the_tasks_stdio_but_loses_the_exit_code shows it for both)
    @pytest.mark.parametrize("env", ["root"], indirect=True)
    def test_kill_reaches_the_created_container(self, env: Env) -> None:
        """`kill` reaches a container that create/start mode created: its TERM trap runs."""
        assert 0 == env.user.uid
        trap = 'trap "echo TERM; exit 3" TERM; echo started; while :; do sleep 0.2; done'
        with _cluster_oci_conf(CREATE_START_OCI_CONF):
            created, job = _started(env, "cskill",
                                    env.bundle(["sh", "-c", trap], name="cskill"))
            assert 0 == env.run("kill", "cskill", "TERM").returncode
            created.wait_exit(timeout=90)
            assert 0 == env.run("delete", "cskill").returncode
        assert "TERM" in created.stdout()
        assert [] == leftovers(env, "cskill", [job])
