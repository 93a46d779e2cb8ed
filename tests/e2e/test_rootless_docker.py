"""Rootless docker, as Slurm's containers guide integrates docker: one dockerd per user
under rootlesskit, scrun-py its runtime, every container a Slurm job of that user.

scripts/engines.sh starts the test user's rootless dockerd with docs/docker.md's
rootless daemon.json (`scripts/engines.sh env` names its socket and the --root it gives
scrun-py); each test runs the docker CLI as that user, and ends by checking that no job,
anchor, spool dir or staged rootfs is left (test_engines' guard).  Inside rootlesskit,
/run is a private copy: a step started from there would make slurmstepd print
"couldn't chdir" (24.11 on: fail), so no test may see that line, in the engine's output
or in slurmd's log.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import STATE, TEST_USER, VENV, User, squeue, wait_until
from tests.e2e.test_engines import (  # noqa: F401 - the fixture
    CMD_TIMEOUT_S,
    DOC_BLOCK,
    ENGINES_SH,
    REPO,
    TRAP,
    Engine,
    _guarded,
    _name,
    engines_up,
    run_on_pty,
)

pytestmark = [pytest.mark.e2e, pytest.mark.engines]

CHDIR_ERROR = "couldn't chdir"
SLURMD_LOG = STATE / "slurmd.log"


def _engines_env() -> dict[str, str]:
    out = subprocess.run([str(ENGINES_SH), "env"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


class RootlessDocker(Engine):
    """The docker CLI of the test user, talking to that user's rootless dockerd."""

    def __init__(self, user: User, host: str, root: Path) -> None:
        super().__init__("docker", user)
        self.host = host
        self.spool_root = root

    @property
    def label(self) -> str:
        return "docker-rootless"

    @property
    def root(self) -> Path:
        return self.spool_root

    def env(self) -> dict[str, str]:
        env = self.user.env(DOCKER_HOST=self.host)
        env.pop("SLURM_CONF", None)  # the engine finds the cluster from its daemon.json
        return env


@pytest.fixture
def rootless_docker(engines_up: None) -> Iterator[RootlessDocker]:  # noqa: F811
    env = _engines_env()
    eng = RootlessDocker(User.named(TEST_USER), env["SCRUN_TEST_ROOTLESS_DOCKER_HOST"],
                         Path(env["SCRUN_TEST_ROOTLESS_DOCKER_ROOT"]))
    log_start = SLURMD_LOG.stat().st_size if SLURMD_LOG.exists() else 0
    for _ in _guarded(eng):  # its checks run once the test is done
        yield eng
    with open(SLURMD_LOG, errors="replace") as fh:
        fh.seek(log_start)
        assert [] == [ln for ln in fh.read().splitlines() if CHDIR_ERROR in ln]


def _job_of(eng: Engine, name: str) -> str:
    wait_until(lambda: "job=" in eng.logs(name), "the job id in the logs")
    job = re.search(r"job=(\d+)", eng.logs(name))
    assert job, eng.logs(name)
    return job.group(1)


class TestRootlessDocker:
    def test_installed_configuration_is_the_documented_one(
            self, rootless_docker: RootlessDocker) -> None:
        """engines.sh starts the daemon with docs/docker.md's rootless blocks (with the
        test cluster's paths)."""
        for title in ("rootless-daemon.json", "dockerd-rootless.env"):
            block = subprocess.run([str(DOC_BLOCK), str(REPO / "docs" / "docker.md"), title],
                                   capture_output=True, text=True, check=True,
                                   timeout=30).stdout
            block = block.replace("/opt/scrun-py/bin/scrun-py", f"{VENV}/bin/scrun-py")
            block = block.replace("/etc/slurm/", f"{STATE}/engines/conf/")
            assert block == (STATE / "rootless-docker" / title.removeprefix(
                "rootless-")).read_text(), title

    def test_daemon_is_rootless_and_has_the_runtime(self, rootless_docker: RootlessDocker,
                                                    ) -> None:
        """The daemon runs as the test user (rootless, in rootlesskit's namespace) with
        scrun-py registered as the runtime "slurm"."""
        eng = rootless_docker
        res = eng("info", "--format", "{{json .SecurityOptions}} {{json .Runtimes}}")
        assert 0 == res.returncode, res.stderr
        assert "name=rootless" in res.stdout
        assert '"slurm"' in res.stdout
        pid = int(Path(eng.host.removeprefix("unix://")).with_name("docker.pid").read_text())
        assert eng.user.uid == os.stat(f"/proc/{pid}").st_uid

    def test_run_is_a_job_of_the_user_with_its_exit_code(
            self, rootless_docker: RootlessDocker) -> None:
        """`docker run` prints the container's output; the container is a job of the
        user, RUNNING while it runs (squeue %u); its exit code is docker's."""
        eng = rootless_docker
        name = _name("rl")
        res = eng.run("-d", "--name", name, eng.image, "sh", "-c",
                      "echo job=$SLURM_JOB_ID; echo uid=$(id -u); sleep 60; exit 42")
        try:
            assert 0 == res.returncode, res.stderr
            job = _job_of(eng, name)
            assert f"RUNNING|{TEST_USER}" == squeue("-j", job, "-o", "%T|%u").strip()
            assert "uid=0" in eng.logs(name)  # root of the container, the user's job
        finally:
            eng.rm_force(name)
        res = eng.run("--name", name, eng.image, "sh", "-c", "echo hi; exit 42")
        try:
            assert 42 == res.returncode, res.stderr
            assert "hi\n" == res.stdout
            assert CHDIR_ERROR not in res.stderr
            assert ("exited", 42) == eng.exit_code(name)
        finally:
            rm = eng("rm", name)
        assert 0 == rm.returncode, rm.stderr

    def test_working_directory_is_the_containers(self, rootless_docker: RootlessDocker,
                                                 ) -> None:
        """The container's process starts in config.json's cwd (`/`, or `-w`), not where
        scrun-py starts Slurm's programs."""
        eng = rootless_docker
        res = eng.run("--rm", eng.image, "pwd")
        assert (0, "/\n") == (res.returncode, res.stdout), res.stderr
        res = eng.run("--rm", "-w", "/etc", eng.image, "pwd")
        assert (0, "/etc\n") == (res.returncode, res.stdout), res.stderr

    def test_stdin(self, rootless_docker: RootlessDocker) -> None:
        res = rootless_docker.run("--rm", "-i", rootless_docker.image, "cat",
                                  input="hello\nworld\n")
        assert 0 == res.returncode, res.stderr
        assert "hello\nworld\n" == res.stdout

    def test_tty(self, rootless_docker: RootlessDocker) -> None:
        """`run -t`: the container's stdin and stdout are a terminal."""
        eng = rootless_docker
        rc, text = run_on_pty(
            eng.argv(*eng.run_args(), "--rm", "-t", eng.image, "sh", "-c",
                     "test -t 0 && echo IS-A-TTY; test -t 1 && echo OUT-TTY"),
            eng.env())
        assert 0 == rc, text
        assert "IS-A-TTY" in text and "OUT-TTY" in text, text
        assert CHDIR_ERROR not in text

    def test_exec(self, rootless_docker: RootlessDocker) -> None:
        """`docker exec` runs in the container on its node: output, exit code, -t, -i;
        its step starts from a directory the node can enter (no "couldn't chdir")."""
        eng = rootless_docker
        name = _name("rlexec")
        res = eng.run("-d", "--name", name, eng.image, "sleep", "120")
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: eng.exit_code(name)[0] == "running", "running")
            ex = eng("exec", name, "echo", "exec-ok")
            assert (0, "exec-ok\n", "") == (ex.returncode, ex.stdout, ex.stderr)
            ex = eng("exec", name, "sh", "-c", "exit 7")
            assert 7 == ex.returncode, ex.stderr
            assert CHDIR_ERROR not in ex.stderr
            ex = eng("exec", "-t", name, "sh", "-c", "test -t 0 && echo tty-ok")
            assert (0, "tty-ok") == (ex.returncode, ex.stdout.strip()), ex.stderr
            ex = eng("exec", "-i", name, "cat", input="in-ok\n")
            assert (0, "in-ok\n", "") == (ex.returncode, ex.stdout, ex.stderr)
        finally:
            eng.rm_force(name)

    def test_kill_stop_rm(self, rootless_docker: RootlessDocker) -> None:
        """kill --signal USR1 and stop reach the container's trap (RunTimeKill in a
        step); its exit code is the container's; rm removes it."""
        eng = rootless_docker
        name = _name("rlsig")
        res = eng.run("-d", "--name", name, eng.image, "sh", "-c", TRAP)
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: "started" in eng.logs(name), "the container to start")
            kill = eng("kill", "--signal", "USR1", name)
            assert (0, "") == (kill.returncode, kill.stderr)
            wait_until(lambda: "USR1" in eng.logs(name), "the USR1 trap")
            stop = eng("stop", "-t", "5", name)
            assert (0, "") == (stop.returncode, stop.stderr)
            assert ("exited", 3) == eng.exit_code(name)
            logs = eng.logs(name)
            assert ["started", "USR1", "TERM"] == [
                ln for ln in logs.splitlines() if ln in ("started", "USR1", "TERM")]
            assert CHDIR_ERROR not in logs
        finally:
            rm = eng("rm", name)
        assert 0 == rm.returncode, rm.stderr
        assert name not in eng("ps", "-a", "--format", "{{.Names}}").stdout.split()

    def test_kill_of_a_running_container(self, rootless_docker: RootlessDocker) -> None:
        """`docker kill` (SIGKILL) ends the container: exit 137, job gone, rm works."""
        eng = rootless_docker
        name = _name("rlkill")
        res = eng.run("-d", "--name", name, eng.image, "sh", "-c",
                      "echo job=$SLURM_JOB_ID; sleep 120")
        try:
            assert 0 == res.returncode, res.stderr
            job = _job_of(eng, name)
            kill = eng("kill", name)
            assert (0, "") == (kill.returncode, kill.stderr)
            wait_until(lambda: eng.exit_code(name)[0] == "exited", "the container to exit")
            assert ("exited", 137) == eng.exit_code(name)
            wait_until(lambda: squeue("-j", job, "-o", "%T").strip()
                       in ("", "COMPLETED", "FAILED", "CANCELLED"), "the job to end")
        finally:
            rm = eng("rm", name)
        assert 0 == rm.returncode, rm.stderr
