"""The fast entry path: exact argv shapes only, same output as the click CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.entry import _fast_call


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
         {"-f": "/c", "verb": "delete", "id": "c1", "force": ""}),
        (["-f", "/c", "delete", "--force", "c1"],
         {"-f": "/c", "verb": "delete", "id": "c1", "force": "1"}),
        (["delete", "-f", "c1"], {"verb": "delete", "id": "c1", "force": "1"}),
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
        ["-v", "start", "c1"], ["create", "--bundle", "b", "c1"], ["--rootless", "start", "c"],
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
