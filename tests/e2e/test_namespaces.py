"""The container's pid (`state`, --pid-file, the engines' State.Pid) lives in namespaces
of its own that are empty, never in the login node's: a tool that enters "the
container's" namespaces through it (`nsenter`, `podman top`, buildah's RUN steps with
netavark) reaches none of the host's.

Through the real engines (scripts/engines.sh's configuration, docs/docker.md and
docs/podman.md), on the real cluster: docker and podman as root, podman rootless as the
ordinary test user.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import TEST_USER, User, wait_until
from tests.e2e.test_engines import (
    CMD_TIMEOUT_S,
    TRAP,
    Engine,
    _guarded,
    _name,
    engines_up,  # noqa: F401 - the fixture the engine fixtures use
)

pytestmark = [pytest.mark.e2e, pytest.mark.engines]


@pytest.fixture(params=["docker", "podman-root", "podman-rootless"])
def engine(request: pytest.FixtureRequest, engines_up: None) -> Iterator[Engine]:  # noqa: F811
    name, _, who = str(request.param).partition("-")
    yield from _guarded(Engine(name, User.named(TEST_USER if who == "rootless" else "root")))


@pytest.fixture(params=["podman-root", "podman-rootless"])
def podman(request: pytest.FixtureRequest, engines_up: None) -> Iterator[Engine]:  # noqa: F811
    who = str(request.param).partition("-")[2]
    yield from _guarded(Engine("podman", User.named(TEST_USER if who == "rootless" else "root")))


def _pid(engine: Engine, name: str) -> int:
    res = engine("inspect", "-f", "{{.State.Pid}}", name)
    assert 0 == res.returncode, res.stderr
    return int(res.stdout.strip())


def _ns(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def _status_field(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return line.split(":", 1)[1].strip()
    return ""


def _running(engine: Engine, name: str, *command: str) -> int:
    res = engine.run("-d", "--name", name, engine.image, *command)
    assert 0 == res.returncode, res.stderr
    wait_until(lambda: engine.exit_code(name)[0] == "running", "the container to run")
    return _pid(engine, name)


class TestTheContainersPid:
    def test_its_namespaces_are_its_own_and_empty(self, engine: Engine) -> None:
        """The engine's pid is pid 1 of a PID namespace of its own, in a network
        namespace with only `lo` and a mount namespace whose /proc lists only it."""
        name = _name("ns")
        try:
            pid = _running(engine, name, "sleep", "120")
            for kind in ("net", "pid", "mnt"):
                assert _ns("self", kind) != _ns(pid, kind), kind
            assert "1" == _status_field(pid, "NSpid").split()[-1]
            links = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link"],
                                   capture_output=True, text=True, timeout=30, check=True)
            assert ["lo"] == [ln.split(":")[1].strip() for ln in links.stdout.splitlines()]
            listed = subprocess.run(["nsenter", "-t", str(pid), "-m", "ls", "/proc"],
                                    capture_output=True, text=True, timeout=30, check=True)
            assert ["1"] == [e for e in listed.stdout.split() if e.isdigit()]
        finally:
            engine.rm_force(name)

    def test_podman_top_lists_no_login_node_process(self, podman: Engine) -> None:
        """`podman top` (psgo: the pid's mount namespace, its /proc) lists the pid
        alone, as pid 1: none of the login node's processes (slurmctld, this test)."""
        name = _name("top")
        try:
            _running(podman, name, "sleep", "120")
            res = podman("top", name, "pid", "comm", "args")
            assert 0 == res.returncode, res.stderr
            rows = res.stdout.splitlines()[1:]
            assert 1 == len(rows), res.stdout
            assert "1" == rows[0].split()[0], res.stdout
            for other in ("slurmctld", "slurmd", "pytest", "conmon"):
                assert other not in res.stdout
        finally:
            podman.rm_force(name)

    def test_docker_top_lists_only_the_containers_processes(self, engines_up: None) -> None:  # noqa: F811
        """`docker top` (the runtime's `ps`, looked up in the login node's `ps -ef`)
        lists the container's `sleep` and nothing else of the machine: the node of the
        test cluster is this machine, so its pids name the same processes here."""
        for eng in _guarded(Engine("docker", User.named("root"))):
            name = _name("dtop")
            try:
                _running(eng, name, "sleep", "123")
                res = eng("top", name)
                assert 0 == res.returncode, res.stderr
                rows = res.stdout.splitlines()[1:]
                assert rows, res.stdout
                assert all(row.endswith("sleep 123") for row in rows), res.stdout
            finally:
                eng.rm_force(name)

    def test_a_signal_sent_to_the_pid_reaches_the_container(self, engine: Engine) -> None:
        """USR1 and TERM sent straight to the pid (as conmon relays its own) are
        delivered to the container's process, as `kill` would; its exit code is the
        container's."""
        name = _name("sigpid")
        try:
            res = engine.run("-d", "--name", name, engine.image, "sh", "-c", TRAP)
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: "started" in engine.logs(name), "the container to start")
            pid = _pid(engine, name)
            os.kill(pid, signal.SIGUSR1)
            wait_until(lambda: "USR1" in engine.logs(name), "the USR1 trap")
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: engine.exit_code(name)[0] == "exited", "the container's end")
            assert ("exited", 3) == engine.exit_code(name)
        finally:
            engine.rm_force(name)

    def test_the_pid_killed_ends_the_container(self, engine: Engine) -> None:
        """SIGKILL to the pid (conmon's --timeout, a user's kill -9): the engine sees the
        container end with 137, and the anchor kills the container and ends its job
        (the guard checks no job, anchor or spool dir is left)."""
        name = _name("killpid")
        try:
            pid = _running(engine, name, "sleep", "120")
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: engine.exit_code(name)[0] == "exited", "the container's end")
            assert ("exited", 137) == engine.exit_code(name)
        finally:
            engine.rm_force(name)


def _host_network() -> dict[str, str]:
    """The login node's links, routes and firewall rules (counters left out)."""
    def out(*argv: str) -> str:
        if shutil.which(argv[0]) is None:
            return ""
        res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        return res.stdout

    links = "\n".join(line.split(" link/")[0] for line in out("ip", "-o", "link").splitlines())
    rules = "\n".join(line for line in out("iptables-save").splitlines()
                      if not line.startswith("#")).replace(" [0:0]", "")
    ruleset = "\n".join(line for line in out("nft", "list", "ruleset").splitlines()
                        if "counter packets" not in line)
    return {"ip -o link": links, "ip route": out("ip", "route"),
            "ip -6 route": out("ip", "-6", "route"),
            "iptables-save": _no_counters(rules), "nft list ruleset": ruleset}


def _no_counters(rules: str) -> str:
    return re.sub(r" \[\d+:\d+\]", "", rules)


class TestBuild:
    def test_a_run_step_leaves_the_hosts_network_unchanged(self, podman: Engine) -> None:
        """`podman build` with a RUN step through scrun-py (buildah hands the pid's
        network namespace to netavark, whatever containers.conf's netns says): the
        login node's links, routes and firewall rules are as they were.  The same
        build through crun first: what netavark leaves by design for any runtime (its
        own firewall chains, rootful) is there before the scrun-py build, so any
        difference is scrun-py's."""
        context = Path(tempfile.mkdtemp(prefix="scrunpy-build-"))  # the test user reads it
        context.chmod(0o755)
        (context / "Containerfile").write_text(
            f"FROM {podman.image}\nRUN echo from-run; ls /sys/class/net\n")
        (context / "Containerfile").chmod(0o644)
        tag = _name("build")
        try:
            crun = podman("build", "--no-cache", "--runtime", "crun", "-t", f"{tag}-crun",
                          str(context), timeout=CMD_TIMEOUT_S)
            before = _host_network()
            ours = podman("build", "--no-cache", "-t", tag, str(context),
                          timeout=CMD_TIMEOUT_S)
            time.sleep(1)  # netavark's teardown runs as the RUN step ends
            after = _host_network()
        finally:
            podman("rmi", "-f", tag, f"{tag}-crun")
            shutil.rmtree(context, ignore_errors=True)
        for what, text in before.items():
            assert text == after[what], f"{what} changed by the build:\n{ours.stdout}"
        # the RUN step ran (as root), or failed as it does with crun (rootless podman's
        # slirp4netns needs /dev/net/tun, which only root may open on the test machine)
        assert crun.returncode == ours.returncode, (crun.stderr, ours.stderr)
        if crun.returncode == 0:
            assert "from-run" in ours.stdout + ours.stderr
