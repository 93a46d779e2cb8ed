"""An anchor under a flood of connections of its own user's (a runaway script): it keeps
accepting and answering, and `delete --force` of an anchor that answers nothing kills it
before removing anything.

The control server alone (anchor/server.py, in front of a stub lifecycle) for its
bound and its `accept` errors; a real anchor process (tests/unit/anchor_child.py, the
fake Slurm backend, its own descriptor limit lowered) for the flood, the verbs after it
and `delete --force`.  Every wait is bounded: a request is answered within 5 s or fails.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrun_py.anchor import server as server_mod
from scrun_py.base import procs
from scrun_py.base.errors import AnchorUnreachable
from scrun_py.commands import delete
from scrun_py.container import protocol, spool
from scrun_py.container.handle import Container
from tests.unit.anchor_child import CID, AnchorChild
from tests.unit.anchor_harness import quiet_logger
from tests.unit.cli_run import run, stored

FLOOD = 1200  # idle connections: more than the 1,024 descriptors of a default limit
KILL0 = b'{"v":1,"type":"kill","signal":0}\n'
CONNECT_GUARD_S = 30.0  # a flood that cannot connect within this fails (no timing claim)


@pytest.fixture(autouse=True)
def enough_descriptors() -> Iterator[None]:
    """This process holds every flooding connection (and a full backlog of them):
    raise its own limit as needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(FLOOD, server_mod.BACKLOG) + 512
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def connect(path: str) -> socket.socket:
    """A connection to the control socket at `path`, waiting while its backlog is full
    (the anchor must keep accepting for this to return)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    deadline = time.monotonic() + CONNECT_GUARD_S
    try:
        while True:
            try:
                sock.connect(path)
                return sock
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise AssertionError("the anchor stopped accepting connections") from None
                time.sleep(0.001)
    except BaseException:
        sock.close()
        raise


def flood(path: str, count: int) -> list[socket.socket]:
    """`count` idle connections (all closed again if one cannot be made)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(connect(path))
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def stop_process(pid: int) -> None:
    """SIGSTOP `pid` and wait until every thread of it has stopped (the signal takes
    effect later, thread by thread)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while not all(_stopped(stat) for stat in Path(f"/proc/{pid}/task").glob("*/stat")):
        assert time.monotonic() < deadline, "the anchor did not stop"
        time.sleep(0.001)


def _stopped(stat: Path) -> bool:
    """Whether the thread of /proc/PID/task/TID/stat `stat` is stopped (or gone)."""
    try:
        return "T" == stat.read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True


def fill_backlog(path: str) -> list[socket.socket]:
    """Connections until the listen backlog of an anchor that accepts nothing is full
    (the kernel caps it at net.core.somaxconn, 4096 by default)."""
    socks: list[socket.socket] = []
    for _ in range(server_mod.BACKLOG + 2):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except BlockingIOError:
            sock.close()
            return socks
        socks.append(sock)
    close_all(socks)
    raise AssertionError("the backlog never filled")


def ask(path: str, line: bytes) -> dict[str, Any]:
    """`line` on a new connection (once the backlog has room for it); the reply line,
    within 5 s."""
    with connect(path) as sock:
        sock.settimeout(5)
        sock.sendall(line)
        reply: dict[str, Any] = json.loads(protocol.read_line(sock))
        return reply


def no_traceback(child: AnchorChild) -> None:
    text = child.output()
    assert "Traceback" not in text, text[-4000:]


# ---- the control server alone ----------------------------------------------------------------

class _StubLifecycle:
    """What ControlServer calls; `kill` waits on `gate` when a test closes it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.gate = threading.Event()
        self.gate.set()

    def start(self) -> int:
        self.calls.append(("start", None))
        return 7

    def kill(self, sig: int) -> None:
        self.calls.append(("kill", sig))
        self.gate.wait(10)

    def delete(self, force: bool) -> None:
        self.calls.append(("delete", force))


class _FlakyListener:
    """A listening socket whose `accept` first fails with each of `errors`."""

    def __init__(self, real: Any, errors: list[int]) -> None:
        self.real = real
        self.errors = list(errors)

    def _accept(self) -> tuple[int, Any]:
        if self.errors:
            code = self.errors.pop(0)
            raise OSError(code, os.strerror(code))
        return cast(tuple[int, Any], self.real._accept())

    def listen(self, backlog: int) -> None:
        self.real.listen(backlog)

    def shutdown(self, how: int) -> None:
        self.real.shutdown(how)

    def close(self) -> None:
        self.real.close()


@contextlib.contextmanager
def control_server(errors: tuple[int, ...] = ()) -> Iterator[tuple[Any, str]]:
    """The real ControlServer on a socket in a private directory: (server, path)."""
    import _socket

    tmp = tempfile.mkdtemp(prefix="scrun-flood-")
    path = os.path.join(tmp, "control.sock")
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    listener.bind(path)
    listener.listen(64)
    lc = _StubLifecycle()
    srv = server_mod.ControlServer(cast(Any, lc),
                                   cast(Any, _FlakyListener(listener, list(errors))),
                                   quiet_logger())
    srv.start()
    try:
        yield srv, path
    finally:
        lc.gate.set()
        srv.close(grace_s=5.0)
        os.unlink(path)
        os.rmdir(tmp)


def _request_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "scrun-request")


class TestControlServerBound:
    def test_accept_errors_are_waited_out(self) -> None:
        """accept failing (no descriptor, no memory, an aborted connection, a signal) is
        retried, never the end of the server; only close ends the accepting thread."""
        errors = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS,
                  errno.ECONNABORTED, errno.EINTR, errno.EPROTO)
        with mock.patch.object(server_mod, "ACCEPT_RETRY_S", (0.001, 0.001, 0.01)), \
                control_server(errors) as (srv, path):
            assert {"v": 1, "ok": True} == ask(path, KILL0)
            assert [] == srv.listener.errors
            assert srv.thread.is_alive()
        srv.thread.join(5)
        assert not srv.thread.is_alive()

    def test_idle_connections_give_way(self) -> None:
        """Three times MAX_HANDLERS idle connections: at most MAX_HANDLERS threads serve
        at once, the oldest idle ones are told BUSY in one line, and a request still
        gets its answer."""
        with control_server() as (srv, path):
            socks = flood(path, 3 * server_mod.MAX_HANDLERS)
            try:
                assert {"v": 1, "ok": True} == ask(path, KILL0)
                assert _request_threads() <= server_mod.MAX_HANDLERS
                socks[0].settimeout(5)
                reply = json.loads(protocol.read_line(socks[0]))
                assert {"v": 1, "ok": False, "kind": "AnchorError",
                        "message": server_mod.BUSY} == reply
            finally:
                close_all(socks)
            assert [("kill", 0)] == srv.lc.calls

    def test_busy_when_every_slot_serves(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With every slot serving a request that waits, a new connection is answered
        BUSY (after SLOT_WAIT_S), not left hanging; the slots serve again afterwards."""
        monkeypatch.setattr(server_mod, "MAX_HANDLERS", 4)
        monkeypatch.setattr(server_mod, "SLOT_WAIT_S", 0.05)
        with control_server() as (srv, path):
            srv.lc.gate.clear()
            waiting = [connect(path) for _ in range(4)]
            try:
                for sock in waiting:
                    sock.setblocking(True)
                    sock.sendall(KILL0)
                deadline = time.monotonic() + 5
                while len(srv.lc.calls) < 4 and time.monotonic() < deadline:
                    time.sleep(0.005)
                reply = ask(path, KILL0)
                assert (False, "AnchorError") == (reply["ok"], reply["kind"])
                assert reply["message"].startswith("container anchor is busy")
                srv.lc.gate.set()
                assert {"v": 1, "ok": True} == ask(path, KILL0)
            finally:
                close_all(waiting)

    def test_close_answers_the_idle(self) -> None:
        """close does not wait for idle connections to time out: each is answered that
        the anchor is exiting, and close returns at once."""
        with control_server() as (srv, path):
            socks = flood(path, 8)
            deadline = time.monotonic() + 5
            while _request_threads() < 8 and time.monotonic() < deadline:
                time.sleep(0.005)
            srv.close(grace_s=30.0)
            try:
                for sock in socks:
                    sock.settimeout(5)
                    reply = json.loads(protocol.read_line(sock))
                    assert ("AnchorUnreachable", server_mod.EXITING) == (
                        reply["kind"], reply["message"])
            finally:
                close_all(socks)


# ---- a real anchor process -------------------------------------------------------------------

class TestFloodedAnchor:
    @pytest.mark.parametrize("nofile", [1024, 48])
    def test_verbs_answer_after_a_flood(self, tmp_path: Path, nofile: int) -> None:
        """1,200 idle connections to an anchor whose descriptor limit is 1,024 (the usual
        default) or 48 (fewer than its connection slots): it keeps accepting, and with
        every flooding connection still open `state` reads created, `start` and `kill`
        are answered (each within 5 s), and the container stops as killed."""
        child = AnchorChild(tmp_path, nofile)
        try:
            socks = flood(child.socket_path, FLOOD)
            try:
                # the connections of the flood the anchor has not accepted yet are taken
                # first (this one connects once there is room in the queue for it)
                assert {"v": 1, "ok": True} == ask(child.socket_path, KILL0)
                assert child.proc.poll() is None
                assert "created" == json.loads(
                    Container(str(child.root), CID).state_line())["status"]
                assert 77 == child.request("start")["job_id"]
                assert "running" == json.loads(
                    Container(str(child.root), CID).state_line())["status"]
                assert {"v": 1, "ok": True} == child.request("kill", signal=0)
                assert {"v": 1, "ok": True} == child.request("kill", signal=15)
                assert 143 == child.proc.wait(10)
            finally:
                close_all(socks)
        finally:
            child.stop()
        no_traceback(child)


FLOOD_SETTINGS = settings(derandomize=True, max_examples=25, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
BEHAVIOURS = ("idle", "close", "half-close", "partial", "line", "bytes-then-close",
              "oversize", "request")
#: runs of connections that each behave alike: (behaviour, payload, how many)
FLOODS = st.lists(st.tuples(st.sampled_from(BEHAVIOURS), st.binary(max_size=200),
                            st.integers(min_value=1, max_value=60)),
                  min_size=1, max_size=20)


def behave(path: str, what: str, payload: bytes) -> socket.socket | None:
    """One flooding connection doing `what`; the socket when it stays open."""
    sock = connect(path)
    sock.setblocking(True)
    sock.settimeout(5)
    data = {"partial": payload.replace(b"\n", b""),
            "line": payload.replace(b"\n", b"") + b"\n",
            "bytes-then-close": payload,
            "oversize": b"x" * (protocol.MAX_MESSAGE + 2),
            "request": KILL0}.get(what, b"")
    try:
        if data:
            sock.sendall(data)
        if what == "half-close":
            sock.shutdown(socket.SHUT_WR)
    except OSError:  # the anchor may have refused it already
        pass
    if what in ("close", "bytes-then-close"):
        sock.close()
        return None
    return sock


class TestFloodFuzz:
    def test_random_connection_behaviours(self, tmp_path: Path) -> None:
        """Floods of connections that stay idle, send part of a line, a line of garbage,
        too much, a request, or close at once, against an anchor whose descriptor limit
        is 64: after each flood (its connections still open) the anchor answers a `kill 0`
        within 5 s and `state` reads created; it never logs a traceback."""
        child = AnchorChild(tmp_path, 64)
        try:

            @FLOOD_SETTINGS
            @given(moves=FLOODS)
            def check(moves: list[tuple[str, bytes, int]]) -> None:
                kept: list[socket.socket] = []
                try:
                    for what, payload, times in moves:
                        for _ in range(times):
                            sock = behave(child.socket_path, what, payload)
                            if sock is not None:
                                kept.append(sock)
                    assert {"v": 1, "ok": True} == child.request("kill", signal=0)
                    assert "created" == json.loads(
                        Container(str(child.root), CID).state_line())["status"]
                finally:
                    close_all(kept)

            check()
            assert child.proc.poll() is None
        finally:
            child.stop()
        no_traceback(child)


# ---- delete --force of an anchor that answers nothing ----------------------------------------

class TestDeleteSilentAnchor:
    @pytest.mark.parametrize("force", [True, False])
    def test_silent_anchor_is_killed_first(self, tmp_path: Path, force: bool,
                                           scancel_args: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        """A created container's anchor that answers nothing (stopped, its backlog full):
        delete (--force or not: deleting a created container kills it) SIGKILLs the
        anchor, cancels its job, and only once the anchor is gone removes the directory;
        nothing is left."""
        seen = scancel_args
        monkeypatch.setattr(delete, "ANCHOR_EXIT_WAIT_S", 0.2)
        child = AnchorChild(tmp_path, 1024)
        try:
            stop_process(child.proc.pid)
            socks = fill_backlog(child.socket_path)
            try:
                with pytest.raises(AnchorUnreachable):
                    child.request("kill", signal=0)
                argv = ["--root", str(child.root), "delete", *(["--force"] * force), CID]
                assert 0 == run(argv)
                assert not child.dir.exists()
                assert "77\n" == seen.read_text()
                assert -signal.SIGKILL == child.proc.wait(10)
            finally:
                close_all(socks)
        finally:
            child.stop()

    def test_running_silent_anchor_without_force_is_refused(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> None:
        """Without --force a running container whose anchor answers nothing is refused
        with runc's words; the anchor is not killed and everything stays."""
        monkeypatch.setattr(delete, "ANCHOR_EXIT_WAIT_S", 0.2)
        child = AnchorChild(tmp_path, 1024)
        try:
            assert 77 == child.request("start")["job_id"]
            stop_process(child.proc.pid)
            socks = fill_backlog(child.socket_path)
            try:
                assert 1 == run(["--root", str(child.root), "delete", CID])
                assert "that is not stopped: running" in capsys.readouterr().err
                assert child.dir.exists()
                assert child.proc.poll() is None
            finally:
                close_all(socks)
        finally:
            child.stop()

    @pytest.mark.parametrize("sigkill", ["survives", "refused"])
    def test_directory_kept_when_the_anchor_stays(self, tmp_root: Path, sigkill: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
        """An anchor that does not answer and cannot be made to go (it outlives SIGKILL,
        or the signal is refused): delete --force fails with one line and removes
        nothing.  (The anchor here is this process: the SIGKILL is a stand-in.)"""
        pid = os.getpid()
        cdir = stored(tmp_root, "running", pid, anchor_start=procs.process_start_time(pid))
        monkeypatch.setattr(delete, "ANCHOR_EXIT_WAIT_S", 0.0)
        monkeypatch.setattr(delete, "KILLED_EXIT_WAIT_S", 0.1)
        effect = None if sigkill == "survives" else PermissionError(errno.EPERM, "denied")
        with mock.patch.object(Container, "request", side_effect=AnchorUnreachable("no")), \
                mock.patch.object(delete, "_sigkill", side_effect=effect) as killed:
            assert 1 == run(["--root", str(tmp_root), "delete", "--force", CID])
        assert 1 == killed.call_count
        err = capsys.readouterr().err
        assert 1 == len(err.splitlines()), err
        assert f"container anchor (pid {pid}) does not answer and" in err
        assert (cdir / spool.STATE_FILE).exists()
