"""The fast entry path: exact argv shapes only, same output as the click CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.entry import _fast_state


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrun_py", *args], capture_output=True,
                          text=True, timeout=60, check=False)


class TestFastStateParsing:
    @pytest.mark.parametrize(("argv", "expected"), [
        (["state", "c1"], {"id": "c1"}),
        (["--root", "/r", "state", "c1"], {"--root": "/r", "id": "c1"}),
        (["--root=/r", "--log", "/l", "--log-format=json", "state", "c1"],
         {"--root": "/r", "--log": "/l", "--log-format": "json", "id": "c1"}),
    ])
    def test_simple_shapes_take_the_fast_path(self, argv: list[str],
                                              expected: dict[str, str]) -> None:
        """Only --root/--log/--log-format and `state ID` are parsed by the fast path."""
        assert expected == _fast_state(argv)

    @pytest.mark.parametrize("argv", [
        ["--debug", "state", "c1"], ["state"], ["state", "a", "b"], ["state", "--help"],
        ["--root"], ["--root", "/r", "--root", "/s", "state", "c"], ["kill", "c1"],
        ["--log-format", "xml", "state", "c1"], ["-f", "x", "state", "c1"],
    ])
    def test_anything_else_goes_to_click(self, argv: list[str]) -> None:
        """Every other argv shape is left to the click CLI."""
        assert None is _fast_state(argv)


class TestFastPathOutput:
    def test_version_matches_click(self) -> None:
        """`--version` (fast path) prints what the click `version` verb prints."""
        fast = _run("--version")
        slow = _run("--debug", "version")
        assert (0, slow.stdout) == (fast.returncode, fast.stdout)
        assert 3 == len(fast.stdout.splitlines())

    def test_state_error_is_logged(self, tmp_path: Path) -> None:
        """An unknown id on the fast path gives the same one line and JSON record."""
        log = tmp_path / "log.json"
        res = _run("--root", str(tmp_path), "--log", str(log), "--log-format", "json",
                   "state", "ghost")
        assert 1 == res.returncode
        assert "scrun-py: container does not exist\n" == res.stderr
        record = json.loads(log.read_text())
        assert ("error", "container does not exist") == (record["level"], record["msg"])
