"""base/callerpath: the files a caller names, against what another local user can plant
in their place.  The other user is played by lchown (the unit tests run as root in CI;
as an ordinary user those cases are skipped)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrun_py.base import callerpath

OTHER_UID = 4242  # a uid no test process runs as
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="lchown to another uid needs root")


def _other_link(link: Path, target: str, uid: int = OTHER_UID) -> Path:
    link.symlink_to(target)
    os.lchown(link, uid, uid)
    return link


def _fast(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """fn(*args) in a thread that must end within 5 s (nothing may block)."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn(*args, **kwargs))
        except BaseException as exc:  # handed back to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), f"{fn.__name__} blocked"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


class TestOpen:
    def test_regular_file_is_appended(self, tmp_path: Path) -> None:
        log = tmp_path / "log"
        callerpath.append(str(log), b"one\n")
        callerpath.append(str(log), b"two\n")
        assert ("one\ntwo\n", 0o644) == (log.read_text(), log.stat().st_mode & 0o777)

    def test_own_symlink_is_followed(self, tmp_path: Path) -> None:
        """An engine's own link (the caller's) keeps working."""
        target = tmp_path / "target"
        (tmp_path / "link").symlink_to(target)
        callerpath.append(str(tmp_path / "link"), b"x")
        assert "x" == target.read_text()

    def test_relative_own_symlink_chain(self, tmp_path: Path) -> None:
        (tmp_path / "sub").mkdir()
        target = tmp_path / "sub" / "target"
        (tmp_path / "sub" / "l2").symlink_to("target")
        (tmp_path / "l1").symlink_to("sub/l2")
        callerpath.append(str(tmp_path / "l1"), b"x")
        assert "x" == target.read_text()

    @as_root
    def test_other_users_symlink_is_refused(self, tmp_path: Path) -> None:
        """Another user's link in a directory they do not own (/tmp is root's): refused,
        the target untouched (what fs.protected_symlinks does in sticky directories)."""
        target = tmp_path / "bashrc"
        target.write_text("mine\n")
        link = _other_link(tmp_path / "scrun.log", str(target))
        with pytest.raises(callerpath.Refused) as info:
            callerpath.append(str(link), b"$(id)\n")
        assert ("a symbolic link of uid 4242, who owns neither it nor its directory for "
                "uid 0: refusing it") == info.value.strerror
        assert "mine\n" == target.read_text()

    @as_root
    def test_other_users_link_at_the_end_of_a_chain_is_refused(self, tmp_path: Path) -> None:
        target = tmp_path / "target"
        target.write_text("")
        _other_link(tmp_path / "evil", str(target))
        (tmp_path / "mine").symlink_to("evil")
        with pytest.raises(callerpath.Refused):
            callerpath.append(str(tmp_path / "mine"), b"x")
        assert "" == target.read_text()

    @as_root
    def test_link_of_the_directorys_owner_is_followed(self, tmp_path: Path) -> None:
        """A link made by the owner of its directory is as good as the directory."""
        home = tmp_path / "home"
        home.mkdir()
        os.chown(home, OTHER_UID, OTHER_UID)
        target = tmp_path / "target"
        _other_link(home / "link", str(target))
        callerpath.append(str(home / "link"), b"x")
        assert "x" == target.read_text()

    @as_root
    def test_file_made_first_by_another_user(self, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """A log another user made first (0666, in a directory they do not own) would let
        them read every record: refused to a caller who would create it; a file of the
        directory's owner, of root, or opened without O_CREAT, is used."""
        log = tmp_path / "scrun.log"
        log.write_text("")
        log.chmod(0o666)
        os.chown(log, OTHER_UID, OTHER_UID)
        monkeypatch.setattr(os, "geteuid", lambda: 4343)
        with pytest.raises(callerpath.Refused) as info:
            callerpath.append(str(log), b"secret\n")
        assert ("a file of uid 4242, who owns neither it nor its directory for uid 4343: "
                "refusing it") == info.value.strerror
        assert "" == log.read_text()
        os.close(callerpath.open_file(str(log), os.O_RDONLY))  # reading it is fine
        os.chown(tmp_path, OTHER_UID, OTHER_UID)  # the directory's owner's file: used
        callerpath.append(str(log), b"x")
        os.chown(tmp_path, 0, 0)
        os.chown(log, 0, 0)  # root's: used
        callerpath.append(str(log), b"y")
        assert "xy" == log.read_text()

    def test_no_links_at_all(self, tmp_path: Path) -> None:
        (tmp_path / "link").symlink_to(tmp_path / "target")
        with pytest.raises(callerpath.Refused, match="a symbolic link: refusing it"):
            callerpath.open_file(str(tmp_path / "link"), os.O_WRONLY | os.O_CREAT, links=False)
        assert not (tmp_path / "target").exists()

    def test_link_loop(self, tmp_path: Path) -> None:
        (tmp_path / "a").symlink_to("b")
        (tmp_path / "b").symlink_to("a")
        with pytest.raises(callerpath.Refused, match="more than 40 symbolic links"):
            callerpath.append(str(tmp_path / "a"), b"x")

    @pytest.mark.parametrize("flags", [os.O_WRONLY | os.O_APPEND | os.O_CREAT, os.O_RDONLY])
    def test_fifo_is_refused_at_once(self, tmp_path: Path, flags: int) -> None:
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(callerpath.Refused, match="a FIFO, not a regular file"):
            _fast(callerpath.open_file, str(tmp_path / "fifo"), flags)

    def test_symlink_to_dev_zero_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "zero").symlink_to("/dev/zero")
        with pytest.raises(callerpath.Refused, match="a character device"):
            _fast(callerpath.read, str(tmp_path / "zero"), 1 << 20, "a file")

    def test_socket_and_directory_are_refused(self, tmp_path: Path) -> None:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(tmp_path / "sock"))
            with pytest.raises(callerpath.Refused, match="a socket, not a regular file"):
                callerpath.append(str(tmp_path / "sock"), b"x")
        with pytest.raises(callerpath.Refused, match="a directory, not a regular file"):
            callerpath.append(str(tmp_path), b"x")

    def test_null_device_is_a_file(self) -> None:
        callerpath.append("/dev/null", b"x")

    def test_missing_directory(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            callerpath.append(str(tmp_path / "no" / "log"), b"x")

    def test_descriptor_is_blocking_and_close_on_exec(self, tmp_path: Path) -> None:
        fd = callerpath.open_file(str(tmp_path / "f"), os.O_WRONLY | os.O_CREAT)
        try:
            assert (True, False) == (os.get_blocking(fd), os.get_inheritable(fd))
        finally:
            os.close(fd)


class TestRead:
    def test_capped(self, tmp_path: Path) -> None:
        (tmp_path / "f").write_bytes(b"x" * 11)
        with pytest.raises(callerpath.Refused) as info:
            callerpath.read(str(tmp_path / "f"), 10, "a process file")
        assert (11, "a process file of 11 bytes, more than the 10 scrun-py reads: "
                    "refusing it") == (info.value.size, info.value.strerror)
        assert b"x" * 10 == callerpath.read(str(tmp_path / "f"), 11, "a file")[:10]


class TestCheckWritable:
    def test_planted_kinds(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "fifo")
        (tmp_path / "link").symlink_to("/dev/zero")
        (tmp_path / "file").write_text("")
        for name in ("fifo", str(tmp_path)):
            with pytest.raises(callerpath.Refused):
                callerpath.check_writable(str(tmp_path / name))
        for name in ("link", "file", "missing"):  # a link is replaced by rename
            callerpath.check_writable(str(tmp_path / name))

    @as_root
    def test_other_users_entry_in_a_sticky_directory(self, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
        """Another user's link or file in a sticky directory they do not own (/tmp): the
        kernel would refuse the rename, so it is refused now, not once the job is
        granted.  Elsewhere, or for the directory's owner or root, rename replaces it."""
        _other_link(tmp_path / "link", "/dev/zero")
        (tmp_path / "file").write_text("")
        os.chown(tmp_path / "file", OTHER_UID, OTHER_UID)
        monkeypatch.setattr(os, "geteuid", lambda: 4343)  # the caller: neither owner
        for name in ("link", "file"):  # not sticky: replaced
            callerpath.check_writable(str(tmp_path / name))
        tmp_path.chmod(0o1777)
        for name, what in (("link", "a symbolic link"), ("file", "a regular file")):
            with pytest.raises(callerpath.Refused) as info:
                callerpath.check_writable(str(tmp_path / name))
            assert (f"{what} of uid 4242 in a sticky directory, which uid 4343 may not "
                    "replace: refusing it") == info.value.strerror
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        callerpath.check_writable(str(tmp_path / "link"))


class TestRemove:
    def test_removes_own_file_holding_what_was_written(self, tmp_path: Path) -> None:
        (tmp_path / "pid").write_text("123")
        assert not callerpath.remove(str(tmp_path / "pid"), b"124")
        assert callerpath.remove(str(tmp_path / "pid"), b"123")
        assert not (tmp_path / "pid").exists()

    def test_fifo_is_left_unopened(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "pid")
        assert not _fast(callerpath.remove, str(tmp_path / "pid"), b"123")
        assert (tmp_path / "pid").exists()

    def test_symlink_is_neither_followed_nor_removed(self, tmp_path: Path) -> None:
        (tmp_path / "target").write_text("123")
        (tmp_path / "pid").symlink_to(tmp_path / "target")
        assert not callerpath.remove(str(tmp_path / "pid"), b"123")
        assert ((tmp_path / "pid").is_symlink(), "123") == (
            True, (tmp_path / "target").read_text())

    @as_root
    def test_other_users_file_is_left(self, tmp_path: Path) -> None:
        (tmp_path / "pid").write_text("123")
        os.chown(tmp_path / "pid", OTHER_UID, OTHER_UID)
        assert not callerpath.remove(str(tmp_path / "pid"), b"123")
        assert (tmp_path / "pid").exists()


@as_root
class TestConsoleSocket:
    """The pty master goes only to a listener of the caller's or root's."""

    @staticmethod
    def _listener(path: Path, uid: int) -> tuple[int, int]:
        """A forked listener running as `uid` on `path`; (pid, read end of a pipe that
        says whether it received a descriptor)."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.close(r)
                os.setgid(uid)
                os.setuid(uid)
                srv = socket.socket(socket.AF_UNIX)
                srv.bind(str(path))
                srv.listen(1)
                os.write(w, b"L")
                conn, _ = srv.accept()
                conn.settimeout(3)
                try:
                    _, fds, _, _ = socket.recv_fds(conn, 1024, 1)
                except OSError:
                    fds = []
                os.write(w, b"Y" if fds else b"N")
            finally:
                os._exit(0)
        os.close(w)
        assert b"L" == os.read(r, 1)
        return pid, r

    @pytest.fixture
    def shared(self) -> Iterator[Path]:
        """A sticky world-writable directory the other uid can reach (pytest's own
        tmp_path is below a 0700 directory)."""
        import shutil
        import tempfile

        path = Path(tempfile.mkdtemp(prefix="scrun-py-console-"))
        path.chmod(0o1777)
        yield path
        shutil.rmtree(path)

    def test_other_users_listener_gets_nothing(self, shared: Path) -> None:
        from scrun_py.anchor.console import send_master
        from scrun_py.base.errors import ScrunError

        tmp_path = shared
        pid, r = self._listener(tmp_path / "console.sock", OTHER_UID)
        master, slave = os.openpty()
        try:
            start = time.monotonic()
            with pytest.raises(ScrunError) as info:
                send_master(str(tmp_path / "console.sock"), master, "/dev/pts/x")
            assert time.monotonic() - start < 5
        finally:
            os.close(master)
            os.close(slave)
        assert (f"--console-socket {tmp_path / 'console.sock'}: its listener runs as uid "
                "4242, not as the caller (uid 0) or root: the terminal is not sent"
                ) == str(info.value)
        assert b"N" == os.read(r, 1)
        os.waitpid(pid, 0)

    def test_callers_listener_gets_the_master(self, tmp_path: Path) -> None:
        from scrun_py.anchor.console import send_master

        pid, r = self._listener(tmp_path / "console.sock", os.geteuid())
        master, slave = os.openpty()
        try:
            send_master(str(tmp_path / "console.sock"), master, "/dev/pts/x")
        finally:
            os.close(master)
            os.close(slave)
        assert b"Y" == os.read(r, 1)
        os.waitpid(pid, 0)
