"""The anchor process end to end in-process: `_run` with the fake Slurm backend, the
readiness pipe, the control socket (through the real client) and its signal handlers.

The anchor runs in the test's (main) thread, where Python delivers signals; the
engine's side (readiness pipe, requests) runs in a second thread."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scrun_py.anchor import __main__ as anchor_main
from scrun_py.anchor import readiness
from scrun_py.anchor.handoff import AnchorSpec, BundleInfo, ConfigInfo, ProcessInfo
from scrun_py.anchor.signals import HANDLED
from scrun_py.base.errors import AllocationFailed, ContainerStillRunning, ProtocolError
from scrun_py.container import spool
from scrun_py.container.handle import Container
from tests.unit.anchor_harness import quiet_logger
from tests.unit.fake_slurm import FakeSlurm

CID = "c1"


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def make_spec(tmp: Path, ready_fd: int, **runtime: Any) -> AnchorSpec:
    root = tmp / "root"
    spool.ensure_root(root)
    Path(spool.make_container_dir(root, CID))
    bundle = tmp / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    info = BundleInfo(path=bundle, rootfs=bundle / "rootfs",
                      config=ConfigInfo(ociVersion="1.0.2", process=ProcessInfo(["true"])))
    return AnchorSpec(
        container_id=CID, root=str(root), orig_bundle=str(bundle), pid_file="",
        console_socket="", log_path="", log_format="json", debug=False, verbosity=0,
        slurm_conf=str(tmp / "slurm.conf"), ready_fd=ready_fd, created="now",
        bundle_info=info.to_dict(), runtime=runtime)


def request(root: Path, kind: str, **fields: Any) -> dict[str, Any]:
    return Container(str(root), CID).request(kind, 5, **fields)


@pytest.fixture(autouse=True)
def signal_handlers() -> Iterator[None]:
    """The anchor installs its handlers in this process: put pytest's back."""
    saved = {sig: signal.getsignal(sig) for sig in HANDLED}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def run_anchor(spec: AnchorSpec, engine: Callable[[], None] | None = None) -> int:
    """The anchor in this thread, `engine` beside it; the anchor's exit code (and what
    `engine` raised, re-raised)."""
    failure: list[BaseException] = []

    def side() -> None:
        try:
            assert engine is not None
            engine()
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)
            os.kill(os.getpid(), signal.SIGTERM)  # the anchor must not wait for ever

    thread = threading.Thread(target=side, daemon=True) if engine else None
    if thread is not None:
        thread.start()
    rc = anchor_main._run(spec, quiet_logger())
    if thread is not None:
        thread.join(10)
    if failure:
        raise failure[0]
    return rc


class TestAnchorProcess:
    def test_lifecycle_over_the_socket(self, tmp_path: Path, fake: FakeSlurm,
                                       pipe: tuple[int, int]) -> None:
        """ready → the record says created → start → kill 0 → delete refused → the step
        exits 7 → the anchor returns 7."""
        spec = make_spec(tmp_path, pipe[1], runtime_kill="crun kill %n.%u.%j.%s.%t")
        root = Path(spec.root)

        def engine() -> None:
            ready = readiness.read_result(pipe[0], 5)
            assert ready is not None
            assert (True, os.getpid()) == (ready["ok"], ready["pid"])
            record = Container(str(root), CID).record()
            assert ("created", 77) == (record.status, record.job_id)
            assert 77 == request(root, "start")["job_id"]
            request(root, "kill", signal=0)
            with pytest.raises(ContainerStillRunning, match="not stopped: running"):
                request(root, "delete", force=False)
            with pytest.raises(ProtocolError, match="invalid signal"):
                request(root, "kill", signal=99)
            assert fake.step is not None
            fake.step.exit(7)

        assert 7 == run_anchor(spec, engine)
        assert not (root / CID / spool.SOCKET_NAME).exists()

    def test_signal_to_the_anchor(self, tmp_path: Path, fake: FakeSlurm,
                                  pipe: tuple[int, int]) -> None:
        """SIGTERM to a created container's anchor: the handler queues it, the lifecycle
        stops the container with 143."""
        spec = make_spec(tmp_path, pipe[1])

        def engine() -> None:
            readiness.read_result(pipe[0], 5)
            os.kill(os.getpid(), signal.SIGTERM)

        assert 143 == run_anchor(spec, engine)

    def test_create_fails(self, tmp_path: Path, fake: FakeSlurm,
                          pipe: tuple[int, int]) -> None:
        """The allocation fails: the readiness pipe carries the error class and message,
        and the container dir is gone."""
        fake.fail["allocate"] = AllocationFailed("job allocation failed: bad partition")
        spec = make_spec(tmp_path, pipe[1])
        assert 1 == run_anchor(spec)
        result = readiness.read_result(pipe[0], 5)
        assert {"ok": False, "kind": "AllocationFailed",
                "message": "job allocation failed: bad partition"} == result
        assert not (Path(spec.root) / CID).exists()

    @pytest.mark.parametrize(("value", "message"), [
        ("soon", "SCRUN_PY_ALLOC_TIMEOUT: not a number: 'soon'")])
    def test_bad_settings_fail_before_slurm(self, tmp_path: Path, fake: FakeSlurm,
                                            pipe: tuple[int, int], value: str, message: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SCRUN_PY_ALLOC_TIMEOUT", value)
        spec = make_spec(tmp_path, pipe[1])
        assert 1 == run_anchor(spec)
        result = readiness.read_result(pipe[0], 5)
        assert result is not None
        assert ("ScrunError", message) == (result["kind"], result["message"])
        assert [] == fake.calls

    def test_terminal_needs_a_console_socket(self, tmp_path: Path, fake: FakeSlurm,
                                             pipe: tuple[int, int]) -> None:
        spec = make_spec(tmp_path, pipe[1])
        info = dict(spec.bundle_info)
        info["config"] = {**info["config"], "process": {"args": ["sh"], "terminal": True}}
        spec = AnchorSpec(**{**spec._asdict(), "bundle_info": info})
        r, w = os.pipe()  # stdin that is not a tty
        saved = os.dup(0)
        os.dup2(r, 0)
        try:
            assert 1 == run_anchor(spec)
        finally:
            os.dup2(saved, 0)
            for fd in (saved, r, w):
                os.close(fd)
        result = readiness.read_result(pipe[0], 5)
        assert result is not None
        assert "process.terminal is true but no --console-socket was given" == result["message"]


    def test_terminal_master_goes_to_the_console_socket(self, tmp_path: Path, fake: FakeSlurm,
                                                        pipe: tuple[int, int]) -> None:
        """process.terminal: once created, the pty master is sent to --console-socket
        (runc's message: the pty name, SCM_RIGHTS with the fd); the step gets the slave."""
        spec = make_spec(tmp_path, pipe[1])
        info = dict(spec.bundle_info)
        info["config"] = {**info["config"], "process": {"args": ["sh"], "terminal": True}}
        console = tmp_path / "console.sock"
        spec = AnchorSpec(**{**spec._asdict(), "bundle_info": info,
                             "console_socket": str(console)})
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(console))
        listener.listen(1)

        def receive() -> tuple[bytes, list[int]]:
            conn, _ = listener.accept()
            with conn:
                msg, fds, _flags, _addr = socket.recv_fds(conn, 1024, 1)
            return msg, fds

        def engine() -> None:
            msg, fds = receive()
            assert msg.startswith(b"/dev/pts/")
            assert 1 == len(fds)
            os.close(fds[0])
            readiness.read_result(pipe[0], 5)
            request(Path(spec.root), "start")
            assert fake.launches[0].pty
            assert fake.launches[0].pty_slave is not None
            assert fake.step is not None
            fake.step.exit(0)

        try:
            assert 0 == run_anchor(spec, engine)
        finally:
            listener.close()
