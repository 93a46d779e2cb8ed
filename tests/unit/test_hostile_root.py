"""Another local user plants things in the caller's --root (the /tmp fallback of the
default root is in a shared directory): every verb refuses them with one line and
touches nothing outside the root, and nothing is sent to a socket another user listens
on.  The suite runs as root: "another user" is nobody (uid 65534), by chown and setuid.

Each refusal has a control beside it: the same step on the caller's own root works.
"""

from __future__ import annotations

import _socket
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import ContainerNotFound, PermissionDenied, ScrunError
from scrun_py.base.layout import SOCKET_NAME, STATE_FILE
from scrun_py.container import spool
from scrun_py.container.handle import Container
from scrun_py.container.rootdir import MAX_RECORD_BYTES, NOT_OWNER
from tests.unit.cli_run import run, stored

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown and setuid need root")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The victim's precious files."""
    home = tmp_path / "home"
    (home / "precious" / "deep").mkdir(parents=True)
    (home / "precious" / "deep" / "key").write_text("secret")
    (home / "c1").mkdir()  # looks like a half-created container: no record, no socket
    (home / "c1" / "data").write_text("keep")
    return home


def _intact(home: Path) -> None:
    assert "secret" == (home / "precious" / "deep" / "key").read_text()
    assert "keep" == (home / "c1" / "data").read_text()


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert 1 == len(lines), err
    assert "Traceback" not in err
    return lines[0]


class TestRootIsASymlink:
    """The root itself is a symlink to the victim's home."""

    @pytest.mark.parametrize("argv", [["delete", "c1"], ["delete", "--force", "c1"],
                                      ["delete", "--force", "precious"],
                                      ["delete", "--force", "--regex", "."],
                                      ["state", "c1"], ["start", "c1"], ["kill", "c1"],
                                      ["kill", "--regex", ".", "KILL"]])
    def test_refused(self, tmp_path: Path, home: Path, argv: list[str],
                     capsys: pytest.CaptureFixture[str]) -> None:
        root = tmp_path / "root"
        root.symlink_to(home)
        assert 1 == run(["--root", str(root), *argv])
        assert (f"root directory {root} is a symbolic link: refusing it"
                in _one_line(capsys.readouterr().err))
        _intact(home)

    def test_create_refuses_it(self, tmp_path: Path, home: Path) -> None:
        root = tmp_path / "root"
        root.symlink_to(home)
        with pytest.raises(ScrunError, match="is a symbolic link: refusing it"):
            spool.ensure_root(root)
        with pytest.raises(ScrunError, match="is a symbolic link: refusing it"):
            spool.make_container_dir(root, "c9")
        assert not (home / "c9").exists()

    def test_control_own_root(self, tmp_path: Path, home: Path) -> None:
        """The same delete on a real directory of the caller's removes a half-created
        container (0700, only what scrun-py writes): what the refusal above prevents
        would have happened to one."""
        (home / "c2").mkdir(mode=0o700)
        (home / "c2" / ".state.json.123.tmp").write_text("{")
        assert 0 == run(["--root", str(home), "delete", "c2"])
        assert not (home / "c2").exists()
        _intact(home)


class TestNotOurDirectory:
    """A directory without a record is removed only when scrun-py could have made it:
    `--root ~` and `delete .ssh` must not empty ~/.ssh."""

    @pytest.mark.parametrize("force", [[], ["--force"]])
    def test_foreign_name_kept(self, home: Path, force: list[str],
                               capsys: pytest.CaptureFixture[str]) -> None:
        (home / "c1").chmod(0o700)
        assert 1 == run(["--root", str(home), "delete", *force, "c1"])
        assert (f"{home / 'c1'} has no container record and holds what scrun-py does not "
                "make ('data'): not removing it"
                == _one_line(capsys.readouterr().err).removeprefix("scrun-py: "))
        _intact(home)

    def test_other_mode_kept(self, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
        (home / "empty").mkdir(mode=0o755)
        assert 1 == run(["--root", str(home), "delete", "empty"])
        assert "(mode 0755): not removing it" in _one_line(capsys.readouterr().err)
        assert (home / "empty").is_dir()


@needs_root
class TestRootMadeByAnotherUser:
    @pytest.mark.parametrize("mode", [0o755, 0o777, 0o1777])
    @pytest.mark.parametrize("argv", [["delete", "c1"], ["delete", "--force", "c1"],
                                      ["delete", "--force", "--regex", "."],
                                      ["state", "c1"], ["start", "c1"], ["kill", "c1"]])
    def test_planted_symlink_in_planted_root(self, tmp_path: Path, home: Path, mode: int,
                                             argv: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
        """nobody makes the root (0755, 0777, 01777) and puts `c1` in it, a symlink to
        the victim's directory: refused, naming the owner; the victim's files stay."""
        root = tmp_path / "root"
        root.mkdir()
        (root / "c1").symlink_to(home / "c1")
        os.lchown(root / "c1", NOBODY, NOBODY)
        os.chown(root, NOBODY, NOBODY)
        root.chmod(mode)
        assert 1 == run(["--root", str(root), *argv])
        assert (f"root directory {root} belongs to uid {NOBODY}, not to uid 0: refusing it"
                in _one_line(capsys.readouterr().err))
        _intact(home)
        assert (root / "c1").is_symlink()

    def test_writable_by_others(self, tmp_path: Path, home: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
        root = tmp_path / "root"
        root.mkdir()
        (root / "c1").symlink_to(home / "c1")
        root.chmod(0o777)
        assert 1 == run(["--root", str(root), "delete", "--force", "c1"])
        assert "is writable by other users (mode 0777)" in _one_line(capsys.readouterr().err)
        _intact(home)


class TestPlantedContainer:
    """The root is the caller's; what is in it is not (or is a symlink)."""

    def test_container_symlink_is_refused(self, tmp_root: Path, home: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
        (tmp_root / "c1").symlink_to(home / "c1")
        for argv in (["delete", "c1"], ["delete", "--force", "c1"], ["state", "c1"]):
            assert 1 == run(["--root", str(tmp_root), *argv])
            assert (f"container directory {tmp_root / 'c1'} is a symbolic link: refusing it"
                    == _one_line(capsys.readouterr().err).removeprefix("scrun-py: "))
        _intact(home)

    def test_regex_skips_symlinks(self, tmp_root: Path, home: Path) -> None:
        (tmp_root / "c1").symlink_to(home / "c1")
        assert [] == spool.matching_ids(tmp_root, ".")
        assert 0 == run(["--root", str(tmp_root), "delete", "--force", "--regex", "."])
        _intact(home)

    @needs_root
    def test_directory_of_another_user(self, tmp_root: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
        cdir = stored(tmp_root, "stopped", 0)
        os.chown(cdir, NOBODY, NOBODY)
        for argv in (["state", "c1"], ["delete", "--force", "c1"], ["kill", "c1"]):
            assert 1 == run(["--root", str(tmp_root), *argv])
            assert NOT_OWNER == _one_line(capsys.readouterr().err).removeprefix("scrun-py: ")
        assert (cdir / STATE_FILE).exists()

    @needs_root
    def test_record_of_another_user(self, tmp_root: Path) -> None:
        cdir = stored(tmp_root, "stopped", 0)
        os.chown(cdir / STATE_FILE, NOBODY, NOBODY)
        with pytest.raises(PermissionDenied, match=f"^{NOT_OWNER}$"):
            Container(str(tmp_root), "c1").record()
        os.chown(cdir / STATE_FILE, 0, 0)  # control
        assert "stopped" == Container(str(tmp_root), "c1").record().status

    def test_record_writable_by_others(self, tmp_root: Path) -> None:
        cdir = stored(tmp_root, "stopped", 0)
        (cdir / STATE_FILE).chmod(0o666)
        with pytest.raises(PermissionDenied, match="is writable by other users"):
            Container(str(tmp_root), "c1").record()

    def test_record_symlink_to_dev_zero(self, tmp_root: Path) -> None:
        """Read with O_NOFOLLOW: refused at once, not read until memory runs out."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        (cdir / STATE_FILE).symlink_to("/dev/zero")
        started = time.monotonic()
        with pytest.raises(ScrunError, match="refusing it"):
            Container(str(tmp_root), "c1").record()
        assert time.monotonic() - started < 5  # generous: a read of /dev/zero never ends

    def test_record_too_large(self, tmp_root: Path) -> None:
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        with open(cdir / STATE_FILE, "wb") as fh:
            fh.truncate(MAX_RECORD_BYTES + 1)
        (cdir / STATE_FILE).chmod(0o600)
        with pytest.raises(ScrunError, match=f"more than the {MAX_RECORD_BYTES} scrun-py reads"):
            Container(str(tmp_root), "c1").record()

    def test_record_fifo(self, tmp_root: Path) -> None:
        """A FIFO would block a plain open: not a regular file, refused at once."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        os.mkfifo(cdir / STATE_FILE, 0o600)
        with pytest.raises(ScrunError, match="is not a regular file: refusing it"):
            Container(str(tmp_root), "c1").record()

    def test_missing_root_is_not_found(self, tmp_path: Path) -> None:
        with pytest.raises(ContainerNotFound):
            Container(str(tmp_path / "absent"), "c1").record()
        assert 0 == run(["--root", str(tmp_path / "absent"), "delete", "--force", "c1"])


@pytest.fixture
def foreign_listener(tmp_root: Path) -> Iterator[tuple[Path, Path]]:
    """A created container of the caller's whose socket another user (nobody) listens
    on: the socket file is the caller's, the listener's credentials are nobody's
    (SO_PEERCRED reports who called listen).  Yields the container dir and the file
    in which the listener writes what it received."""
    cdir = stored(tmp_root, "created", os.getpid(),
                  anchor_start=procs.process_start_time(os.getpid()))
    got = tmp_root.parent / "received"
    got.write_bytes(b"")
    os.chown(got, NOBODY, NOBODY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(cdir / SOCKET_NAME))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            sock.listen(4)
            sock.settimeout(10)
            while True:
                conn, _ = sock.accept()
                with conn, open(got, "ab") as fh:
                    conn.settimeout(2)
                    try:
                        while data := conn.recv(65536):
                            fh.write(data)
                    except OSError:
                        pass
                    conn.sendall(b'{"v":1,"ok":true,"job_id":1}\n')
        finally:
            os._exit(0)
    sock.close()
    time.sleep(0.2)  # the child's listen
    try:
        yield cdir, got
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


@needs_root
class TestForeignAnchor:
    @pytest.mark.parametrize("argv", [["start", "c1"], ["kill", "c1", "TERM"],
                                      ["delete", "c1"]])
    def test_nothing_sent(self, tmp_root: Path, foreign_listener: tuple[Path, Path],
                          argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        _, got = foreign_listener
        assert 1 == run(["--root", str(tmp_root), *argv])
        assert NOT_OWNER == _one_line(capsys.readouterr().err).removeprefix("scrun-py: ")
        time.sleep(0.1)
        assert b"" == got.read_bytes()

    def test_connect_refuses(self, tmp_root: Path,
                             foreign_listener: tuple[Path, Path]) -> None:
        _, got = foreign_listener
        with pytest.raises(PermissionDenied, match=f"^{NOT_OWNER}$"):
            Container(str(tmp_root), "c1").connect()
        assert b"" == got.read_bytes()

    def test_control_own_listener(self, tmp_root: Path) -> None:
        """The same request to a listener of the caller's is sent and answered."""
        cdir = stored(tmp_root, "created", os.getpid(),
                      anchor_start=procs.process_start_time(os.getpid()))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(cdir / SOCKET_NAME))
            server.listen()
            raw = Container(str(tmp_root), "c1").connect()
            client = _socket.socket(fileno=raw.detach())
            conn, _ = server.accept()
            with conn:
                client.sendall(b"ping\n")
                assert b"ping\n" == conn.recv(16)
            client.close()

    def test_socket_that_is_not_a_socket(self, tmp_root: Path) -> None:
        cdir = stored(tmp_root, "created", os.getpid(),
                      anchor_start=procs.process_start_time(os.getpid()))
        (cdir / SOCKET_NAME).symlink_to("/run/other.sock")
        with pytest.raises(PermissionDenied, match=f"^{NOT_OWNER}$"):
            Container(str(tmp_root), "c1").connect()
