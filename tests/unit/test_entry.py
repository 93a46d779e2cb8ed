"""The fast entry path: exact argv shapes only, same output as the click CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.entry import _fast_call, _run_fast


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrun_py", *args], capture_output=True,
                          text=True, timeout=60, check=False)


class TestFastCallParsing:
    @pytest.mark.parametrize(("argv", "expected"), [
        (["state", "c1"], {"verb": "state", "id": "c1", "force": ""}),
        (["--root", "/r", "state", "c1"],
         {"--root": "/r", "verb": "state", "id": "c1", "force": ""}),
        (["--root=/r", "--log", "/l", "--log-format=json", "state", "c1"],
         {"--root": "/r", "--log": "/l", "--log-format": "json", "verb": "state", "id": "c1",
          "force": ""}),
        # docker: runtimeArgs (-f) first, then containerd's globals
        (["-f", "/c/slurm.conf", "--root", "/r", "--log", "/l", "--log-format", "json",
          "start", "c1"],
         {"-f": "/c/slurm.conf", "--root": "/r", "--log": "/l", "--log-format": "json",
          "verb": "start", "id": "c1", "force": ""}),
        (["--slurm-conf=/c", "--systemd-cgroup", "delete", "c1"],
         {"-f": "/c", "verb": "delete", "id": "c1", "force": "", "ignored": "--systemd-cgroup"}),
        (["-f", "/c", "delete", "--force", "c1"],
         {"-f": "/c", "verb": "delete", "id": "c1", "force": "1"}),
        (["delete", "-f", "c1"], {"verb": "delete", "id": "c1", "force": "1"}),
        # docker (containerd's shim) and podman (conmon) create
        (["--root", "/r", "--log", "/l", "--log-format", "json", "create", "--bundle", "/b",
          "--pid-file", "/b/init.pid", "c1"],
         {"--root": "/r", "--log": "/l", "--log-format": "json", "bundle": "/b",
          "pid_file": "/b/init.pid", "verb": "create", "id": "c1", "force": ""}),
        (["--systemd-cgroup", "create", "--bundle", "/b", "--pid-file=/p", "--no-pivot",
          "--no-new-keyring", "--console-socket", "/s", "c1"],
         {"bundle": "/b", "pid_file": "/p", "console_socket": "/s", "verb": "create",
          "id": "c1", "force": "", "ignored": "--systemd-cgroup",
          "ignored_create": "--no-pivot --no-new-keyring"}),
        (["create", "-b", "b", "c1"], {"bundle": "b", "verb": "create", "id": "c1",
                                       "force": ""}),
    ])
    def test_engine_shapes_take_the_fast_path(self, argv: list[str],
                                              expected: dict[str, str]) -> None:
        """The argv docker and podman send for state, start and delete."""
        assert expected == _fast_call(argv)

    @pytest.mark.parametrize("argv", [
        ["--debug", "state", "c1"], ["state"], ["state", "a", "b"], ["state", "--help"],
        ["--root"], ["--root", "/r", "--root", "/s", "state", "c"], ["kill", "c1"],
        ["--log-format", "xml", "state", "c1"], ["-f", "x", "-f", "y", "state", "c1"],
        ["start", "--force", "c1"], ["delete", "--force"], ["delete", "-a", "c1"],
        ["-v", "start", "c1"], ["create", "--bundle", "b", "-b", "c", "c1"],
        ["--rootless", "start", "c"], ["create", "--preserve-fds", "3", "c1"],
        ["create", "--bundle", "b"], ["create", "c1", "--bundle", "b"],
        ["create", "--pidfd-socket", "/s", "c1"], ["create", "--bundle"],
    ])
    def test_anything_else_goes_to_click(self, argv: list[str]) -> None:
        """Every other argv shape is left to the click CLI."""
        assert None is _fast_call(argv)


class TestFastPathOutput:
    def test_version_matches_click(self) -> None:
        """`--version` (fast path) prints what the click `version` verb prints."""
        fast = _run("--version")
        slow = _run("--debug", "version")
        assert (0, slow.stdout) == (fast.returncode, fast.stdout)
        assert 3 == len(fast.stdout.splitlines())

    @pytest.mark.parametrize("verb", [["start"], ["delete"], ["delete", "--force"]])
    def test_start_and_delete_errors_match_click(self, tmp_path: Path,
                                                 verb: list[str]) -> None:
        """start/delete of an unknown id: the fast path (engine argv) and click (--debug
        forces it) give the same exit status and stderr."""
        fast = _run("--root", str(tmp_path), *verb, "ghost")
        slow = _run("--debug", "--root", str(tmp_path), *verb, "ghost")
        assert (slow.returncode, slow.stderr) == (fast.returncode, fast.stderr)

    def test_state_error_is_logged(self, tmp_path: Path) -> None:
        """An unknown id on the fast path gives the same one line and JSON record."""
        log = tmp_path / "log.json"
        res = _run("--root", str(tmp_path), "--log", str(log), "--log-format", "json",
                   "state", "ghost")
        assert 1 == res.returncode
        assert "scrun-py: container does not exist\n" == res.stderr
        record = json.loads(log.read_text())
        assert ("error", "container does not exist") == (record["level"], record["msg"])


class TestFastPathFailures:
    """An unexpected error on the click-free path ends like it does through click: one
    line on stderr, one error record in --log, exit 1, no traceback (issue 13.5)."""

    @pytest.mark.parametrize("verb", [["state"], ["start"], ["delete"], ["delete", "--force"]])
    def test_state_json_is_a_directory(self, tmp_path: Path, verb: list[str]) -> None:
        """state.json a directory: `internal error: …`, the same as through click."""
        (tmp_path / "c1" / "state.json").mkdir(parents=True)
        log = tmp_path / "log.json"
        fast = _run("--root", str(tmp_path), "--log", str(log), "--log-format", "json",
                    *verb, "c1")
        assert _fast_call(["--root", "r", *verb, "c1"]) is not None
        assert 1 == fast.returncode
        assert 1 == len(fast.stderr.splitlines())
        assert fast.stderr.startswith("scrun-py: internal error: IsADirectoryError(")
        assert "Traceback" not in fast.stderr
        record = json.loads(log.read_text())
        assert ("error", fast.stderr.strip().removeprefix("scrun-py: ")) == (
            record["level"], record["msg"])
        slow = _run("--debug", "--root", str(tmp_path), *verb, "c1")
        assert (slow.returncode, slow.stderr) == (fast.returncode, fast.stderr)

    def test_unexpected_exception_in_process(self, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
        """Whatever the verb raises, _run_fast returns 1 and writes the record."""
        from unittest import mock

        log = tmp_path / "log.txt"
        call = _fast_call(["--root", str(tmp_path), "--log", str(log), "state", "c1"])
        assert call is not None
        with mock.patch("scrun_py.commands.state.run", side_effect=RuntimeError("boom")):
            assert 1 == _run_fast(call)
        assert "scrun-py: internal error: RuntimeError('boom')\n" == capsys.readouterr().err
        assert 'level=error msg="internal error: RuntimeError(\'boom\')"' in log.read_text()

    def test_interrupted(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Ctrl-C on the fast path: `interrupted`, exit 130, like click's path."""
        from unittest import mock

        call = _fast_call(["--root", str(tmp_path), "start", "c1"])
        assert call is not None
        with mock.patch("scrun_py.commands.start.run", side_effect=KeyboardInterrupt):
            assert 130 == _run_fast(call)
        assert "scrun-py: interrupted\n" == capsys.readouterr().err

    def test_ignored_flag_logged(self, tmp_path: Path) -> None:
        """--systemd-cgroup on the fast path is recorded at debug, as through click."""
        log = tmp_path / "log.json"
        res = subprocess.run(
            [sys.executable, "-m", "scrun_py", "--root", str(tmp_path), "--log", str(log),
             "--log-format", "json", "--systemd-cgroup", "delete", "--force", "ghost"],
            capture_output=True, text=True, timeout=60, check=False,
            env={"SCRUN_FILE_DEBUG": "debug"})
        assert (0, "") == (res.returncode, res.stderr)
        record = json.loads(log.read_text())
        assert ("debug", "--systemd-cgroup ignored") == (record["level"], record["msg"])
