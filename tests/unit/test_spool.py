"""Unit tests for scrun_py.container.spool: ids, the per-container dir, pid files and
socket addresses.

The socket tests bind real AF_UNIX sockets inside tmp_path (no other process).
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrun_py.base import callerpath
from scrun_py.base.errors import (
    AnchorUnreachable,
    ContainerExists,
    ContainerNotFound,
    InvalidContainerId,
    ScrunError,
)
from scrun_py.container import rootdir, spool
from scrun_py.container.handle import Container
from scrun_py.container.record import validate_id

SUN_PATH_MAX = 107  # usable bytes of sockaddr_un.sun_path (108 with the NUL)


@pytest.fixture
def tmp_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    spool.ensure_root(root)
    return root


@pytest.fixture
def long_root(tmp_path: Path) -> Path:
    """A --root of well over 200 characters."""
    root = tmp_path / ("r" * 100) / ("o" * 100) / "scrun"
    assert len(str(root)) > 200
    spool.ensure_root(root)
    return root


class TestValidateId:
    @pytest.mark.parametrize("cid", [
        "c1", "ABC", "0", "a.b", "a_b", "a-b", "a+b", "my-container_1.2+x", "...a",
        "4e7d8b7b1c2f9d3f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f", "x" * 255,
    ])
    def test_accepts_runc_style_ids(self, cid: str) -> None:
        """Letters, digits, '_', '+', '-' and '.' up to 255 bytes are valid (runc's rule)."""
        assert cid == validate_id(cid)

    @pytest.mark.parametrize("cid", [
        "/", "a/b", "/abc", "abc/", ".", "..", "a\0b", "\0", "a b", " a", "a ", "a\tb",
        "c1\n", "\nc1", "a:b", "a*b", "a$b", "caf\u00e9", "\udcff",
    ])
    def test_rejects_bad_ids(self, cid: str) -> None:
        """Separators, path components, NUL, whitespace (even a trailing newline) and
        non-ASCII characters are rejected with runc's message."""
        with pytest.raises(InvalidContainerId, match=r"^invalid container ID format: "):
            validate_id(cid)

    def test_rejects_empty(self) -> None:
        """An empty id is rejected and the reason says so."""
        with pytest.raises(InvalidContainerId) as info:
            validate_id("")
        assert "invalid container ID format: empty" == str(info.value)

    @pytest.mark.parametrize("cid", ["x" * 256, "x" * 1025, "x" * 100_000])
    def test_rejects_absurd_length(self, cid: str) -> None:
        """More than 255 bytes (a path component's limit) or 1024 characters is too long."""
        with pytest.raises(InvalidContainerId, match="too long"):
            validate_id(cid)

    def test_container_dir_validates(self, tmp_root: Path) -> None:
        """container_dir() never builds a path from an invalid id."""
        with pytest.raises(InvalidContainerId):
            spool.container_dir(tmp_root, "..")
        assert str(tmp_root / "c1") == spool.container_dir(tmp_root, "c1")


NOBODY = 65534
# ensure_root(argv[1]) in a child process: exit 3 with the message of a ScrunError
ENSURE_ROOT = """
import sys
from scrun_py.base.errors import ScrunError
from scrun_py.container import spool
try:
    spool.ensure_root(sys.argv[1])
except ScrunError as exc:
    print(exc)
    sys.exit(3)
"""


def as_nobody(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`script` run by this Python as uid and gid 65534 without groups (the caller is root),
    importing the scrun_py under test."""
    package_root = Path(spool.__file__).resolve().parents[2]
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
         sys.executable, "-c", script, *args],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(package_root)}, cwd="/",
        capture_output=True, text=True, timeout=60, check=False)


class TestEnsureRoot:
    def test_creates_missing_root(self, tmp_path: Path) -> None:
        """A missing --root is created with its parents, itself mode 0700."""
        root = tmp_path / "a" / "b" / "root"
        spool.ensure_root(root)
        assert 0o700 == stat.S_IMODE(root.stat().st_mode)

    def test_existing_root(self, tmp_root: Path) -> None:
        """An existing writable --root is accepted as is: the same directory, its mode and
        its content unchanged."""
        (tmp_root / "c1").mkdir(mode=0o700)
        before = tmp_root.stat()
        spool.ensure_root(tmp_root)
        after = tmp_root.stat()
        assert (before.st_ino, 0o700, ["c1"]) == (
            after.st_ino, stat.S_IMODE(after.st_mode), os.listdir(tmp_root))

    def test_root_under_a_file(self, tmp_path: Path) -> None:
        """A --root below a regular file cannot be created, even by root."""
        (tmp_path / "file").write_text("")
        with pytest.raises(ScrunError, match=r"^cannot create root directory .*/file/root: "):
            spool.ensure_root(tmp_path / "file" / "root")

    def test_root_is_a_file(self, tmp_path: Path) -> None:
        """A --root that is a regular file is refused."""
        (tmp_path / "file").write_text("")
        with pytest.raises(ScrunError, match="file"):
            spool.ensure_root(tmp_path / "file")

    def test_not_writable(self, tmp_path: Path) -> None:
        """A --root the user cannot write to is refused, and nothing is made in it.  Root
        is not stopped by directory permissions, so as root the check runs as the ordinary
        uid 65534 (in a child process, in a directory of its own under /tmp)."""
        if os.geteuid() != 0:
            root = tmp_path / "ro"
            root.mkdir(mode=0o500)
            try:
                with pytest.raises(ScrunError, match="not writable"):
                    spool.ensure_root(root)
                assert [] == os.listdir(root)
            finally:
                root.chmod(0o700)
            return
        with tempfile.TemporaryDirectory(prefix="scrun-py-spool-") as base:
            os.chown(base, NOBODY, NOBODY)
            root = Path(base, "ro")
            root.mkdir(mode=0o500)
            os.chown(root, NOBODY, NOBODY)
            res = as_nobody(ENSURE_ROOT, str(root))
            assert (3, "") == (res.returncode, res.stderr), res
            assert "not writable" in res.stdout
            assert [] == os.listdir(root)


    @pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o702])
    def test_writable_by_others(self, tmp_path: Path, mode: int) -> None:
        """A --root that other users can write to (made first by someone else in a shared
        /tmp, or opened up) is refused with its mode named; a 0755 one is accepted."""
        root = tmp_path / "shared"
        root.mkdir()
        root.chmod(mode)
        with pytest.raises(ScrunError, match=rf"^root directory {root} is writable by other "
                                             rf"users \(mode {mode:04o}\): refusing it "
                                             r"\(chmod go-w it\)$"):
            spool.ensure_root(root)
        root.chmod(0o755)
        spool.ensure_root(root)

    def test_owned_by_another_user(self, tmp_path: Path) -> None:
        """A --root that belongs to another uid is refused, even with mode 0700 (as root:
        a directory given to nobody; otherwise "/", which is root's)."""
        if os.geteuid() == 0:
            root = tmp_path / "theirs"
            root.mkdir(mode=0o700)
            os.chown(root, 65534, 65534)
            owner = 65534
        else:
            root, owner = Path("/"), 0
        with pytest.raises(ScrunError, match=rf"^root directory {root} belongs to uid {owner}, "
                                             rf"not to uid {os.geteuid()}: refusing it"):
            spool.ensure_root(root)
        assert not (root / "c1").exists()


class TestMakeContainerDir:
    def test_mode_0700(self, tmp_root: Path) -> None:
        """The container dir is created private to the user."""
        path = Path(spool.make_container_dir(tmp_root, "c1"))
        assert tmp_root / "c1" == path
        assert 0o700 == stat.S_IMODE(path.stat().st_mode)

    def test_duplicate(self, tmp_root: Path) -> None:
        """A second create of the same id is runc's `container with given ID already exists`."""
        Path(spool.make_container_dir(tmp_root, "c1"))
        with pytest.raises(ContainerExists) as info:
            Path(spool.make_container_dir(tmp_root, "c1"))
        assert "container with given ID already exists" == str(info.value)

    def test_invalid_id(self, tmp_root: Path) -> None:
        """An invalid id creates nothing."""
        with pytest.raises(InvalidContainerId):
            Path(spool.make_container_dir(tmp_root, "a/b"))
        assert [] == os.listdir(tmp_root)

    def test_missing_root(self, tmp_path: Path) -> None:
        """Without its --root the dir cannot be created, and the error says so."""
        with pytest.raises(ScrunError, match=r"^cannot create "):
            Path(spool.make_container_dir(tmp_path / "absent", "c1"))


class TestPidFile:
    def test_no_trailing_newline(self, tmp_path: Path) -> None:
        """The pid file holds the bare decimal pid (go-runc parses it with strict Atoi)."""
        path = tmp_path / "pid"
        spool.write_pid_file(path, 4242)
        assert b"4242" == path.read_bytes()

    def test_overwrites_and_leaves_no_temp(self, tmp_path: Path) -> None:
        """Writing again replaces the file; no temporary file is left in the directory."""
        path = tmp_path / "pid"
        spool.write_pid_file(path, 1)
        spool.write_pid_file(path, 22)
        assert b"22" == path.read_bytes()
        assert ["pid"] == os.listdir(tmp_path)

    def test_replaces_planted_symlink(self, tmp_path: Path) -> None:
        """A symlink planted at the pid file path is replaced, and its target is untouched."""
        target = tmp_path / "precious"
        target.write_bytes(b"do not touch")
        path = tmp_path / "pid"
        path.symlink_to(target)
        spool.write_pid_file(path, 4242)
        assert path.is_symlink() is False
        assert b"4242" == path.read_bytes()
        assert b"do not touch" == target.read_bytes()

    def test_missing_directory(self, tmp_path: Path) -> None:
        """A pid file in a directory that does not exist is a ScrunError naming the file."""
        path = tmp_path / "absent" / "pid"
        with pytest.raises(ScrunError, match=f"^cannot write pid file {path}: "):
            spool.write_pid_file(path, 1)

    def test_remove_own_pid_file(self, tmp_path: Path) -> None:
        """A pid file naming the given pid is removed."""
        path = tmp_path / "pid"
        spool.write_pid_file(path, 4242)
        callerpath.remove_pid_file(str(path), 4242)
        assert path.exists() is False

    def test_remove_tolerates_newline(self, tmp_path: Path) -> None:
        """A pid file someone rewrote with a trailing newline still counts as ours."""
        path = tmp_path / "pid"
        path.write_bytes(b"4242\n")
        callerpath.remove_pid_file(str(path), 4242)
        assert path.exists() is False

    def test_keeps_someone_elses_pid_file(self, tmp_path: Path) -> None:
        """A pid file naming another pid is left alone."""
        path = tmp_path / "pid"
        spool.write_pid_file(path, 999)
        callerpath.remove_pid_file(str(path), 4242)
        assert b"999" == path.read_bytes()

    def test_remove_missing(self, tmp_path: Path) -> None:
        """Removing a pid file that is already gone is not an error."""
        callerpath.remove_pid_file(str(tmp_path / "pid"), 4242)
        assert [] == os.listdir(tmp_path)


def _connect(cdir: Path) -> socket.socket:
    """The container handle's connection to the anchor socket in `cdir`."""
    raw = Container(str(cdir.parent), cdir.name).connect()  # the C module's socket
    return socket.socket(fileno=raw.detach())


def _bind(cdir: Path) -> socket.socket:
    """spool.bind's listener (the C module's socket) as a socket.socket, for the tests."""
    return socket.socket(fileno=spool.bind(cdir).detach())


@pytest.fixture
def listener(long_root: Path) -> Iterator[tuple[Path, socket.socket]]:
    cdir = Path(spool.make_container_dir(long_root, "c1"))
    sock = _bind(cdir)
    try:
        yield cdir, sock
    finally:
        sock.close()


class TestSockets:
    def test_long_root_binds_and_connects(self, listener: tuple[Path, socket.socket]) -> None:
        """bind() and connect() work although the socket path is far beyond sun_path."""
        cdir, server = listener
        assert len(os.fsencode(cdir / spool.SOCKET_NAME)) > SUN_PATH_MAX
        with _connect(cdir) as client:
            conn, _ = server.accept()
            with conn:
                client.sendall(b"ping\n")
                assert b"ping\n" == conn.recv(16)
                conn.sendall(b"pong\n")
                assert b"pong\n" == client.recv(16)

    def test_socket_is_private(self, listener: tuple[Path, socket.socket]) -> None:
        """The socket file lives in the container dir with mode 0600."""
        cdir, _ = listener
        mode = (cdir / spool.SOCKET_NAME).stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert 0o600 == stat.S_IMODE(mode)

    def test_rebind_replaces_stale_socket(self, listener: tuple[Path, socket.socket]) -> None:
        """Binding again over a stale socket file (old anchor gone) succeeds: a client now
        reaches the new listener, through a socket file that is private again."""
        cdir, first = listener
        first.close()
        with _bind(cdir) as again, _connect(cdir) as client:
            conn, _ = again.accept()
            with conn:
                client.sendall(b"ping\n")
                assert b"ping\n" == conn.recv(16)
            assert 0o600 == stat.S_IMODE((cdir / spool.SOCKET_NAME).stat().st_mode)

    def test_connect_without_socket(self, long_root: Path) -> None:
        """Connecting where no socket file exists: no anchor runs."""
        cdir = Path(spool.make_container_dir(long_root, "c2"))
        with pytest.raises(AnchorUnreachable):
            _connect(cdir)

    def test_connect_to_stale_socket(self, listener: tuple[Path, socket.socket]) -> None:
        """Connecting to a socket file with no listener behind it is refused."""
        cdir, server = listener
        server.close()
        with pytest.raises(AnchorUnreachable):
            _connect(cdir)

    def test_no_fd_leak(self, listener: tuple[Path, socket.socket]) -> None:
        """connect() and bind() close the directory fd they open."""
        cdir, _ = listener
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(5):
            _connect(cdir).close()
        with pytest.raises(ContainerNotFound):
            _connect(cdir.parent / "absent")
        (cdir.parent / "quiet").mkdir(mode=0o700)  # no socket in it
        with pytest.raises(AnchorUnreachable):
            _connect(cdir.parent / "quiet")
        assert before == len(os.listdir("/proc/self/fd"))


class TestRemoveTree:
    def test_removes_everything(self, tmp_root: Path) -> None:
        """The container dir and its content are removed."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        (cdir / "state.json").write_text("{}")
        rootdir.remove_tree(cdir)
        assert cdir.exists() is False

    def test_already_gone(self, tmp_root: Path) -> None:
        """Removing a dir that is already gone is not an error."""
        rootdir.remove_tree(tmp_root / "c1")
        assert [] == os.listdir(tmp_root)
