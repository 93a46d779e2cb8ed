"""What podman's own system tests ask of the runtime, through real podman (and docker
where docker takes the same path), with scrun-py as the runtime on the real cluster.

* a command that cannot run is refused at `create` in runc's words, which the engines
  turn into their exit codes: 127 not found, 126 not executable (`run`), 125 (`start`);
  `exec` of one gives 127/126 too;
* `--preserve-fds N` and `--device-read-bps` are refused with one line, nothing made;
* `podman run --timeout N`: conmon SIGKILLs the container's pid; afterwards `podman rm`
  leaves no job, anchor, spool dir nor staged copy of the rootfs; nor when the anchor
  itself is SIGKILLed (`delete` runs the stage_out it owed);
* `podman pause` fails with the words docs/podman.md quotes.

The engines' configuration is docs/docker.md's and docs/podman.md's (scripts/engines.sh);
every test ends by checking that nothing is left (tests/e2e/test_engines.py `_guarded`).
"""

# ruff: noqa: F811 - the fixtures engine and engines_up (test_engines.py) are parameters

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from scrun_py.base.layout import STAGE_OUT_FILE
from tests.e2e.conftest import TEST_USER, User, wait_until
from tests.e2e.test_engines import (  # noqa: F401 - engine, engines_up: fixtures
    Engine,
    _guarded,
    _name,
    engine,
    engines_up,
)

pytestmark = [pytest.mark.e2e, pytest.mark.engines]


@pytest.fixture(params=["podman-root", "podman-rootless"])
def podman(request: pytest.FixtureRequest, engines_up: None) -> Iterator[Engine]:
    who = str(request.param).partition("-")[2]
    yield from _guarded(Engine("podman", User.named(TEST_USER if who == "rootless"
                                                    else "root")))


@pytest.fixture
def podman_root(engines_up: None) -> Iterator[Engine]:
    yield from _guarded(Engine("podman", User.named("root")))


class TestCommandThatCannotRun:
    @pytest.mark.parametrize(("command", "code", "words"), [
        ("/no/such/command", 127, "no such file or directory"),
        ("nosuchcommand", 127, "executable file not found in $PATH"),
        ("/etc", 126, "permission denied"),
    ])
    def test_run(self, engine: Engine, command: str, code: int, words: str) -> None:
        """`run IMAGE CMD` of a command missing from the image or not executable fails
        at create with runc's words and the engine's exit code (podman's and docker's
        127/126), without a job."""
        t0 = time.monotonic()
        res = engine.run("--rm", engine.image, command, timeout=60)
        assert code == res.returncode, res.stderr
        assert f'exec: "{command}": ' in res.stderr and words in res.stderr, res.stderr
        assert time.monotonic() - t0 < 30

    def test_podman_start(self, podman: Engine) -> None:
        """`podman create` of a missing command succeeds (podman alone); `podman start`
        then fails with 125, as with crun."""
        name = _name("start")
        res = podman("create", "--network", "none", "--name", name, podman.image,
                     "/no/such/command")
        try:
            assert 0 == res.returncode, res.stderr
            res = podman("start", name)
            assert 125 == res.returncode, res.stderr
            assert "no such file or directory" in res.stderr
        finally:
            podman.rm_force(name)

    def test_exec(self, engine: Engine) -> None:
        """`exec C /etc` gives 126 and `exec C /no/such` 127 (the node's runtime could
        not start them), each with runc's words; a process's own failure keeps its
        status."""
        name = _name("exec")
        res = engine.run("-d", "--name", name, engine.image, "sleep", "120")
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: engine.exit_code(name)[0] == "running", "running")
            # runc's words on stderr too: podman's own exec test looks for them
            ex = engine("exec", name, "/etc")
            assert 126 == ex.returncode, ex.stderr
            assert "permission denied" in ex.stdout + ex.stderr
            ex = engine("exec", name, "/no/such")
            assert 127 == ex.returncode, ex.stderr
            assert "executable file not found" in ex.stdout + ex.stderr
            ex = engine("exec", name, "ls", "/no/such")
            assert 1 == ex.returncode, ex.stderr
        finally:
            engine.rm_force(name)


class TestRefusedSetting:
    def test_device_read_bps(self, podman_root: Engine) -> None:
        """`podman run --device-read-bps` (rootful: rootless podman refuses it itself) is
        refused at create with one line naming the field, instead of a container that
        exits 1 at once on the node; no job is asked for."""
        res = podman_root.run("--rm", "--device-read-bps=/dev/zero:1M", podman_root.image,
                              "true", timeout=60)
        assert 126 == res.returncode, res.stderr
        assert ("linux.resources.blockIO.throttleReadBpsDevice: block I/O throttling is "
                "not supported by scrun-py") in res.stderr


class TestPreserveFds:
    def test_refused(self, podman: Engine) -> None:
        """`podman run --preserve-fds 1` (with a descriptor 3 to pass) fails with one line
        saying why; nothing is made (`_guarded`), no job is asked for."""
        argv = podman.argv(*podman.run_args(), "--rm", "--preserve-fds", "1", podman.image,
                           "true")
        # podman checks that the descriptor exists
        res = subprocess.run(["/bin/sh", "-c", 'exec "$@" 3</dev/null', "sh", *argv],
                             env=podman.env(), stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=60, cwd="/")
        assert 126 == res.returncode, res.stderr
        assert ("--preserve-fds 1: file descriptors cannot follow the container to a "
                "compute node") in res.stderr


class TestEngineKillsTheRuntime:
    def test_timeout_leaves_nothing(self, podman: Engine) -> None:
        """`podman run --timeout 3`: conmon SIGKILLs the container's pid after 3 s; the
        container stops, and after `podman rm` no job, anchor, spool dir or staged copy
        of the rootfs is left (checked by `_guarded`)."""
        name = _name("timeout")
        t0 = time.monotonic()
        res = podman.run("--name", name, "--timeout", "3", podman.image, "sleep", "100",
                         timeout=90)
        try:
            assert time.monotonic() - t0 < 60, res.stderr
            assert 0 != res.returncode, res.stderr
            assert "exited" == podman.exit_code(name)[0]
        finally:
            rm = podman("rm", "-f", name)
            assert 0 == rm.returncode, rm.stderr


    def test_anchor_killed_leaves_nothing(self, podman: Engine) -> None:
        """The anchor itself SIGKILLed while the container runs (its stage_out never
        runs): `podman rm -f` runs the stage_out it owed, and nothing is left, the
        staged copy of the rootfs included (checked by `_guarded`)."""
        name = _name("anchorkill")
        res = podman.run("-d", "--name", name, podman.image, "sleep", "100")
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: podman.exit_code(name)[0] == "running", "running")
            cid = podman("inspect", "-f", "{{.Id}}", name).stdout.strip()
            spool = podman.root / cid
            assert (spool / STAGE_OUT_FILE).is_file()  # the staging script staged it
            assert any(podman.staging.iterdir())
            anchor = json.loads((spool / "state.json").read_text())["anchor_pid"]
            os.kill(anchor, signal.SIGKILL)
        finally:
            rm = podman("rm", "-f", "-t", "0", name)
            assert 0 == rm.returncode, rm.stderr


class TestPause:
    def test_words(self, podman_root: Engine) -> None:
        """`podman pause` (rootful) fails with the words docs/podman.md quotes; the
        container keeps running."""
        name = _name("pause")
        res = podman_root.run("-d", "--name", name, podman_root.image, "sleep", "120")
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: podman_root.exit_code(name)[0] == "running", "running")
            pause = podman_root("pause", name)
            cid = podman_root("inspect", "-f", "{{.Id}}", name).stdout.strip()
            assert 125 == pause.returncode, pause.stderr
            lines = pause.stderr.splitlines()
            assert 2 == len(lines), pause.stderr
            assert "scrun-py: pause is not supported by scrun-py" == lines[0]
            assert lines[1].startswith("Error: `/"), pause.stderr
            assert lines[1].endswith(f"pause {cid}` failed: exit status 1"), pause.stderr
            assert "running" == podman_root.exit_code(name)[0]
        finally:
            podman_root.rm_force(name)
