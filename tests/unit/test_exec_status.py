"""commands/exec.py exec_status: the node runtime's own failure to start an exec'd
process becomes podman's and docker's 127 (not found) and 126 (not executable); every
other status, the process's own, passes unchanged."""

from __future__ import annotations

import pytest

from scrun_py.commands.exec import RUNTIME_EXEC_FAILED, exec_status


class TestExecStatus:
    @pytest.mark.parametrize(("tail", "expected"), [
        # crun 1.8.1 (seen on the test cluster)
        (b"executable file `/no/such` not found in $PATH: No such file or directory\n", 127),
        (b"executable file `nosuch` not found in $PATH: No such file or directory\n", 127),
        (b"open executable: Operation not permitted\n", 126),
        (b"exec container process `/etc/passwd`: Permission denied\n", 126),
        # runc 1.1
        (b'exec failed: unable to start container process: exec: "nosuch": executable '
         b"file not found in $PATH\n", 127),
        (b'exec failed: unable to start container process: exec: "/x": stat /x: no such '
         b"file or directory\n", 127),
        (b'exec failed: unable to start container process: exec: "/etc": permission '
         b"denied\n", 126),
        # the process's output before the runtime's last word does not matter
        (b"hello\nexecutable file `x` not found in $PATH: No such file or directory", 127),
    ])
    def test_runtime_words(self, tail: bytes, expected: int) -> None:
        assert expected == exec_status(RUNTIME_EXEC_FAILED, tail)

    @pytest.mark.parametrize(("status", "tail"), [
        (1, b"ls: /nosuchdir: No such file or directory\n"),  # the process's own failure
        (255, b"ls: /nosuchdir: No such file or directory\n"),  # its own 255
        (255, b""),
        (0, b"executable file `x` not found in $PATH: No such file or directory\n"),
        (127, b"sh: x: not found\n"),
        (255, b"open executable: Operation not permitted\nand then the process spoke\n"),
    ])
    def test_other_statuses_unchanged(self, status: int, tail: bytes) -> None:
        assert status == exec_status(status, tail)


class TestSaidInRuncWords:
    """A status taken for 127/126 comes with one stderr line in runc's words (podman's
    exec test looks for "permission denied"); a process's own status says nothing."""

    @staticmethod
    def _said(capfd: pytest.CaptureFixture[str], status: int, tail: bytes) -> tuple[int, str]:
        from scrun_py.commands.exec import exec_status_said

        code = exec_status_said("/etc")(status, tail)
        return code, capfd.readouterr().err

    def test_not_executable(self, capfd: pytest.CaptureFixture[str]) -> None:
        code, err = self._said(capfd, RUNTIME_EXEC_FAILED,
                               b"open executable: Operation not permitted\n")
        assert code == 126
        assert err == ('exec failed: unable to start container process: exec: "/etc": '
                       "permission denied\n")

    def test_not_found(self, capfd: pytest.CaptureFixture[str]) -> None:
        code, err = self._said(capfd, RUNTIME_EXEC_FAILED,
                               b"executable file `/etc` not found in $PATH: No such file\n")
        assert code == 127
        assert "executable file not found in $PATH" in err

    def test_own_status_silent(self, capfd: pytest.CaptureFixture[str]) -> None:
        code, err = self._said(capfd, 126, b"open executable: Operation not permitted\n")
        assert (code, err) == (126, "")
