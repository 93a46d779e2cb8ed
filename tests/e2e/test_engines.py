"""docker and podman run containers through scrun-py on the real cluster.

scripts/engines.sh writes the engines' configuration from docs/docker.md and
docs/podman.md, starts a private dockerd and imports a busybox image; each test
then runs the engine's own CLI: dockerd as root, podman as root and rootless as
the ordinary test user.  Every engine command has a timeout, and every test ends
by checking that no job, anchor, socket, spool dir or staged rootfs is left.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest

from tests.e2e.conftest import (
    ENGINE_CONF,
    STAGING_BASE,
    STATE,
    TEST_USER,
    VENV,
    User,
    is_anchor_of,
    proc_file,
    scontrol_job,
    spool_entries,
    squeue,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.engines]

REPO = Path(__file__).resolve().parents[2]
ENGINES_SH = REPO / "scripts" / "engines.sh"
DOC_BLOCK = REPO / "scripts" / "doc-block.sh"
DOCKER_DIR = STATE / "docker"
DOCKER_HOST = f"unix://{DOCKER_DIR / 'docker.sock'}"
PODMAN_CONF = STATE / "engines" / "podman" / "containers.conf"
IMAGE = "scrun-busybox"
TEST_TIMEOUT_S = 240
CMD_TIMEOUT_S = 120
TRAP = ('trap "echo USR1" USR1; trap "echo TERM; exit 3" TERM; echo started; '
        "while :; do sleep 0.2; done")


def run_on_pty(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`argv` with a new pty as its stdin, stdout and stderr, in a session of its own:
    its exit status and what it wrote there (killed after CMD_TIMEOUT_S)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, cwd="/",
                            start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + CMD_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, out.decode(errors="replace")

@dataclass
class Engine:
    name: str  # docker | podman
    user: User

    @property
    def label(self) -> str:
        return f"{self.name}-{'root' if self.user.uid == 0 else 'rootless'}"

    @property
    def image(self) -> str:
        return IMAGE if self.name == "docker" else f"localhost/{IMAGE}"

    @property
    def root(self) -> Path:
        """The --root the engine gives scrun-py: where anchors keep spool dirs."""
        if self.name == "docker":
            return DOCKER_DIR / "exec" / "runtime-runc" / "moby"
        if self.user.uid == 0:
            return Path("/run/scrun")
        return Path(f"/run/user/{self.user.uid}/scrun")

    @property
    def staging(self) -> Path:
        return Path(STAGING_BASE.replace("%u", str(self.user.uid)))

    def env(self) -> dict[str, str]:
        # podman 5 (Debian 13) warns about cgroup v1 on every command, into the output
        # the tests read
        extra = {"DOCKER_HOST": DOCKER_HOST} if self.name == "docker" else {
            "CONTAINERS_CONF": str(PODMAN_CONF), "PODMAN_IGNORE_CGROUPSV1_WARNING": "1"}
        env = self.user.env(**extra)
        env.pop("SLURM_CONF", None)  # the engines must find the cluster from their config
        return env

    def argv(self, *args: str) -> list[str]:
        return self.user.argv([self.name, *args])

    def run_args(self) -> list[str]:
        args = ["run", "--network", "none"]
        return [*args, "--runtime", "slurm"] if self.name == "docker" else args

    def __call__(self, *args: str, input: str | None = None,
                 timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env(), input=input,
                              stdin=None if input is not None else subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, cwd="/")

    def run(self, *args: str, input: str | None = None,
            timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return self(*self.run_args(), *args, input=input, timeout=timeout)

    def rm_force(self, name: str) -> None:
        extra = ["-t", "0"] if self.name == "podman" else []
        self("rm", "-f", *extra, name)

    def exit_code(self, name: str) -> tuple[str, int]:
        res = self("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name)
        assert res.returncode == 0, res.stderr
        status, code = res.stdout.split()
        return status, int(code)

    def logs(self, name: str) -> str:
        res = self("logs", name)
        return res.stdout + res.stderr


def _engine_problem() -> str | None:
    res = subprocess.run([str(ENGINES_SH), "up"], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        return f"scripts/engines.sh up failed: {(res.stdout + res.stderr).strip()[-2000:]}"
    return None


@pytest.fixture(scope="session")
def engines_up(cluster: Path) -> None:
    problem = _engine_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(params=["docker", "podman-root", "podman-rootless"])
def engine(request: pytest.FixtureRequest, engines_up: None) -> Iterator[Engine]:
    name, _, who = str(request.param).partition("-")
    yield from _guarded(Engine(name, User.named(TEST_USER if who == "rootless" else "root")))


@pytest.fixture
def rootless_podman(engines_up: None) -> Iterator[Engine]:
    yield from _guarded(Engine("podman", User.named(TEST_USER)))


@pytest.fixture(params=["docker", "podman-rootless"])
def any_engine(request: pytest.FixtureRequest, engines_up: None) -> Iterator[Engine]:
    """docker (as root: its jobs run as root) and rootless podman; afterwards no job,
    anchor or spool dir (the tests that need one engine of each kind, not all three)."""
    if request.param == "docker":
        yield from _guarded(Engine("docker", User.named("root")))
    else:
        yield from _guarded(Engine("podman", User.named(TEST_USER)))


def _guarded(eng: Engine) -> Iterator[Engine]:
    """Yield the engine under a whole-test timeout; afterwards nothing may be left."""
    before = _our_jobs(eng)

    def on_alarm(_sig: int, _frame: FrameType | None) -> None:
        raise TimeoutError(f"test ran longer than {TEST_TIMEOUT_S}s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIMEOUT_S)
    try:
        yield eng
        signal.alarm(TEST_TIMEOUT_S)
        assert [] == leftovers(eng, before)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        # best effort: never leave a container of a failed test behind
        names = eng("ps", "-a", "--format", "{{.Names}}").stdout.split()
        for name in names:
            if name.startswith("scrunpy-"):
                eng.rm_force(name)


def _our_jobs(eng: Engine) -> set[str]:
    out = squeue("-u", eng.user.name, "-n", "scrun", "-o", "%i")
    return set(out.split())


def _anchors(eng: Engine) -> list[str]:
    """Anchors of the engine's root: forked from create, or `python -m scrun_py.anchor
    --spec-fd N` behind unshare (rootless podman), whose environment names the root."""
    out = subprocess.run(["pgrep", "-af", "scrun_py.anchor| create "], capture_output=True,
                         text=True, timeout=30).stdout
    found = []
    for line in out.splitlines():
        pid = int(line.split(maxsplit=1)[0])
        if is_anchor_of(eng.root, proc_file(pid, "cmdline"),
                        lambda pid=pid: proc_file(pid, "environ")):  # type: ignore[misc]
            found.append(line)
    return found


def leftovers(eng: Engine, jobs_before: set[str], wait_s: float = 30) -> list[str]:
    """Jobs, anchors, spool dirs/sockets and staged copies this engine left behind."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [f"job {j}" for j in sorted(_our_jobs(eng) - jobs_before)]
        found += [f"anchor {a[:120]}" for a in _anchors(eng)]
        if eng.root.is_dir():
            found += [f"spool dir {p}" for p in spool_entries(eng.root)]
        if eng.staging.is_dir():
            found += [f"staged rootfs {p}" for p in eng.staging.iterdir()]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _name(tag: str) -> str:
    return f"scrunpy-{tag}-{uuid.uuid4().hex[:8]}"


class TestDocs:
    def test_installed_configuration_is_the_documented_one(self, engines_up: None) -> None:
        """engines.sh installs exactly the docs' blocks (with the test cluster's paths)."""
        subs = [("/opt/scrun-py/bin/scrun-py", f"{VENV}/bin/scrun-py"),
                ("/etc/slurm/", f"{ENGINE_CONF}/"),
                ("/usr/local/bin/scrun-py-slurm", f"{STATE}/engines/podman/scrun-py-slurm")]
        for doc, title, installed in (
                ("docker.md", "daemon.json", DOCKER_DIR / "daemon.json"),
                ("podman.md", "containers.conf", PODMAN_CONF),
                ("podman.md", "scrun-py-slurm", PODMAN_CONF.parent / "scrun-py-slurm")):
            block = subprocess.run([str(DOC_BLOCK), str(REPO / "docs" / doc), title],
                                   capture_output=True, text=True, check=True,
                                   timeout=30).stdout
            for old, new in subs:
                block = block.replace(old, new)
            assert block == installed.read_text(), f"{installed} differs from docs/{doc}"


class TestEngines:
    def test_echo_runs_as_a_slurm_job(self, engine: Engine) -> None:
        """`run --rm IMAGE` prints the output; the container was a job of the user."""
        res = engine.run("--rm", engine.image, "sh", "-c", "echo hi; echo job=$SLURM_JOB_ID")
        assert 0 == res.returncode, res.stderr
        lines = res.stdout.splitlines()
        assert "hi" == lines[0]
        m = re.fullmatch(r"job=(\d+)", lines[1])
        assert m, res.stdout
        fields = scontrol_job(int(m.group(1)))
        assert re.fullmatch("[0-9a-f]{64}", fields["JobName"]), fields  # the container's id
        assert fields["UserId"].startswith(f"{engine.user.name}(")
        assert "COMPLETED" == fields["JobState"]

    def test_job_visible_while_running_with_scrun_options(self, engine: Engine) -> None:
        """A running container is a RUNNING job; SCRUN_* reach it (SCRUN_JOB_NAME names
        it)."""
        name = _name("opts")
        res = engine.run("-d", "--name", name, "-e", "SCRUN_TIMELIMIT=7", "-e",
                         "SCRUN_JOB_NAME=mine", "-e", "SCRUN_PARTITION=other",
                         engine.image, "sh", "-c", "echo job=$SLURM_JOB_ID; sleep 60")
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: "job=" in engine.logs(name), "the job id in the logs")
            job = re.search(r"job=(\d+)", engine.logs(name))
            assert job
            fields = squeue("-j", job.group(1), "-o", "%T|%j|%P|%l|%u").strip()
            assert f"RUNNING|mine|other|7:00|{engine.user.name}" == fields
        finally:
            engine.rm_force(name)

    def test_relative_program_under_the_working_directory(self, engine: Engine) -> None:
        """`-w /bin IMAGE ./busybox` runs /bin/busybox, as with runc: not a path under
        the engine's own working directory (srun 24.11 would prefix its own)."""
        res = engine.run("--rm", "-w", "/bin", engine.image, "./busybox", "echo", "ok")
        assert (0, "ok") == (res.returncode, res.stdout.strip()), res.stderr

    def test_exit_code(self, engine: Engine) -> None:
        name = _name("rc")
        res = engine.run("--name", name, engine.image, "sh", "-c", "exit 42")
        try:
            assert 42 == res.returncode, res.stderr
            assert ("exited", 42) == engine.exit_code(name)
        finally:
            assert 0 == engine("rm", name).returncode

    def test_stdin(self, engine: Engine) -> None:
        res = engine.run("--rm", "-i", engine.image, "cat", input="hello\nworld\n")
        assert 0 == res.returncode, res.stderr
        assert "hello\nworld\n" == res.stdout

    def test_tty(self, engine: Engine) -> None:
        """`run -t`: the container's stdin is a terminal."""
        rc, text = run_on_pty(
            engine.argv(*engine.run_args(), "--rm", "-t", engine.image, "sh", "-c",
                        "test -t 0 && echo IS-A-TTY; test -t 1 && echo OUT-TTY"),
            engine.env())
        assert 0 == rc, text
        assert "IS-A-TTY" in text
        assert "OUT-TTY" in text

    def test_signals_stop_logs_rm(self, engine: Engine) -> None:
        """kill --signal USR1 and stop reach a trap; its exit code is the container's."""
        name = _name("sig")
        res = engine.run("-d", "--name", name, engine.image, "sh", "-c", TRAP)
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: "started" in engine.logs(name), "the container to start")
            kill = engine("kill", "--signal", "USR1", name)
            assert 0 == kill.returncode, kill.stderr
            wait_until(lambda: "USR1" in engine.logs(name), "the USR1 trap")
            t0 = time.monotonic()
            stop = engine("stop", "-t", "2", name)
            assert 0 == stop.returncode, stop.stderr
            assert time.monotonic() - t0 < 30
            assert ("exited", 3) == engine.exit_code(name)
            logs = engine.logs(name)
            assert ["started", "USR1", "TERM"] == [
                ln for ln in logs.splitlines() if ln in ("started", "USR1", "TERM")]
        finally:
            rm = engine("rm", name)
        assert 0 == rm.returncode, rm.stderr

    def test_failed_create_is_reported_and_leaves_nothing(self, engine: Engine) -> None:
        """An allocation that cannot succeed fails `run` promptly with our message."""
        t0 = time.monotonic()
        res = engine.run("--rm", "-e", "SCRUN_PARTITION=nosuch", engine.image, "true",
                         timeout=60)
        elapsed = time.monotonic() - t0
        assert res.returncode in (125, 126), (res.returncode, res.stderr)
        assert "job allocation failed" in res.stderr
        assert "Invalid partition name specified" in res.stderr
        if engine.name == "docker":
            assert "OCI runtime create failed: job allocation failed" in res.stderr
        else:
            assert "OCI runtime error" in res.stderr
        assert elapsed < 30

    def test_exec_works_and_pause_is_not_supported(self, engine: Engine) -> None:
        """`exec` runs a process in the container on its node (output and exit code
        reach the engine); `pause` is refused and the container keeps running."""
        name = _name("exec")
        res = engine.run("-d", "--name", name, engine.image, "sleep", "120")
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: engine.exit_code(name)[0] == "running", "running")
            ex = engine("exec", name, "echo", "exec-ok")
            assert (0, "exec-ok\n") == (ex.returncode, ex.stdout), ex.stderr
            ex = engine("exec", name, "sh", "-c", "exit 7")
            assert 7 == ex.returncode, ex.stderr
            ex = engine("exec", "-t", name, "sh", "-c", "test -t 0 && echo tty-ok")
            assert (0, "tty-ok") == (ex.returncode, ex.stdout.strip()), ex.stderr
            ex = engine("exec", "-i", name, "cat", input="in-ok\n")
            assert (0, "in-ok\n") == (ex.returncode, ex.stdout), ex.stderr
            pause = engine("pause", name)
            assert 0 != pause.returncode
            if engine.name == "podman" and engine.user.uid != 0:
                # rootless podman refuses on its own before asking the runtime
                assert "can not pause" in pause.stderr
            else:
                assert "pause is not supported by scrun-py" in pause.stdout + pause.stderr
            assert "running" == engine.exit_code(name)[0]
        finally:
            engine.rm_force(name)


N_LOAD = 20


#: rootless podman on cgroup v1 writes no linux.resources, and says so
V1_ROOTLESS = "Resource limits are not supported and ignored on cgroups V1 rootless systems"


class TestResources:
    """`--cpus` and `--memory` are the job's CPUs and memory (oci/resources.py), but
    where the engine drops them (rootless podman on cgroup v1: the job is Slurm's default,
    `-e SCRUN_*` is the way there)."""

    @staticmethod
    def _dropped(engine: Engine, res: subprocess.CompletedProcess[str]) -> bool:
        if V1_ROOTLESS not in res.stderr:
            return False
        assert (engine.name, engine.user.uid != 0) == ("podman", True), res.stderr
        return True

    def _job_of(self, engine: Engine, name: str) -> dict[str, str]:
        wait_until(lambda: "job=" in engine.logs(name), "the job id in the logs")
        job = re.search(r"job=(\d+)", engine.logs(name))
        assert job, engine.logs(name)
        return scontrol_job(int(job.group(1)))

    def test_cpus_and_memory_become_the_jobs_request(self, engine: Engine) -> None:
        name = _name("res")
        res = engine.run("-d", "--name", name, "--cpus", "1.5", "--memory", "300m",
                         engine.image, "sh", "-c", "echo job=$SLURM_JOB_ID; sleep 60")
        try:
            assert 0 == res.returncode, res.stderr
            fields = self._job_of(engine, name)
            # 1.5 CPUs: rounded up to 2; 300 MiB per node
            got = (fields["NumCPUs"], fields["MinMemoryNode"])
            if self._dropped(engine, res):  # Slurm's default: one CPU, no memory asked
                assert "1" == got[0] and "300M" != got[1], fields
            else:
                assert ("2", "300M") == got, fields
        finally:
            engine.rm_force(name)

    def test_an_explicit_variable_wins(self, engine: Engine) -> None:
        name = _name("resx")
        res = engine.run("-d", "--name", name, "--cpus", "2", "--memory", "300m",
                         "-e", "SCRUN_CPUS_PER_TASK=1", engine.image, "sh", "-c",
                         "echo job=$SLURM_JOB_ID; sleep 60")
        try:
            assert 0 == res.returncode, res.stderr
            fields = self._job_of(engine, name)
            assert "1" == fields["NumCPUs"], fields
            if not self._dropped(engine, res):
                assert "300M" == fields["MinMemoryNode"], fields
        finally:
            engine.rm_force(name)

    def test_memory_no_node_has_fails_at_create(self, engine: Engine) -> None:
        """`--memory 900g` on nodes of a few GB: `run` fails with Slurm's reason, and no
        job, anchor or file is left (the fixture checks)."""
        res = engine.run("--rm", "--memory", "900g", engine.image, "true", timeout=60)
        if self._dropped(engine, res):
            assert 0 == res.returncode, res.stderr
            return
        assert res.returncode in (125, 126), (res.returncode, res.stderr)
        assert "job allocation failed" in res.stderr
        assert "Memory specification can not be satisfied" in res.stderr, res.stderr


class TestEngineLoad:
    @pytest.mark.case("L-03")
    def test_twenty_concurrent_rootless_podman_runs(self, rootless_podman: Engine) -> None:
        """20 `podman run --rm` at once as the ordinary user: each container is its own
        job, prints its own line and returns its own exit code (i % 5); nothing is left."""
        eng = rootless_podman
        names = [_name(f"load{i}") for i in range(N_LOAD)]
        procs = [subprocess.Popen(
            eng.argv(*eng.run_args(), "--rm", "--name", name, eng.image, "sh", "-c",
                     f"echo load-{i} job=$SLURM_JOB_ID; exit {i % 5}"),
            env=eng.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd="/") for i, name in enumerate(names)]
        deadline = time.monotonic() + TEST_TIMEOUT_S - 60
        wrong, jobs = [], set()
        try:
            for i, proc in enumerate(procs):
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
                m = re.fullmatch(rf"load-{i} job=(\d+)\n", out)
                if proc.returncode != i % 5 or not m:
                    wrong.append(f"load-{i}: rc={proc.returncode} out={out!r} "
                                 f"err={err[-300:]!r}")
                else:
                    jobs.add(m.group(1))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        assert [] == wrong
        assert N_LOAD == len(jobs), f"job ids not distinct: {sorted(jobs)}"
        assert [] == [n for n in eng("ps", "-a", "--format", "{{.Names}}").stdout.split()
                      if n in names]
