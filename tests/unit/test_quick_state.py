"""`state`'s os+json path prints what the full path prints, and leaves every other case
(errors included) to it."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scrun_py import procs, spool
from scrun_py.quick_state import answer
from tests.unit.cli_run import run, stored


def _full(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    capsys.readouterr()
    assert 0 == run([*extra, "--root", str(root), "state", "c1"])
    return capsys.readouterr().out.strip()


ME = os.getpid()


@pytest.mark.parametrize(("status", "pid", "fields"), [
    ("created", ME, {"anchor_start": procs.process_start_time(ME)}),
    ("running", ME, {"annotations": {"a": "b"}}),
    ("running", ME, {"anchor_start": "1"}),  # the pid was reused: stopped
    ("creating", 0, {}), ("stopped", 0, {"exit_code": 3}),
    ("running", 2 ** 22 + 1, {}),  # no such process: stopped
])
def test_same_document_as_the_full_path(tmp_root: Path, capsys: pytest.CaptureFixture[str],
                                        status: str, pid: int,
                                        fields: dict[str, object]) -> None:
    """Every status, live and dead anchors: the line the full path prints."""
    stored(tmp_root, status, pid, **fields)
    line = answer(["--root", str(tmp_root), "state", "c1"], {})
    assert line is not None
    assert _full(tmp_root, capsys) == line
    assert _full(tmp_root, capsys, "--log-format", "json") == answer(
        ["--log-format=json", "--root", str(tmp_root), "state", "c1"], {})


@pytest.mark.parametrize("argv", [
    ["state", "c1"], ["--root", "R", "state"], ["--root", "R", "--root", "R", "state", "c1"],
    ["--debug", "--root", "R", "state", "c1"], ["--root", "R", "state", "c/1"],
    ["--root", "R", "state", ".."], ["--root", "R", "--log-format", "xml", "state", "c1"],
    ["--root", "R", "--log", "syslog:x", "state", "c1"], ["--root", "R", "state", "c2"],
    ["--root", "R", "-f=x", "state", "c1"], ["--root", "R", "kill", "c1"],
    ["-f", "x", "--slurm-conf", "y", "--root", "R", "state", "c1"],
])
def test_other_shapes_go_the_full_way(tmp_root: Path, argv: list[str]) -> None:
    """No --root, other options, odd ids, a missing record: None."""
    stored(tmp_root, "running", ME)
    assert None is answer([str(tmp_root) if a == "R" else a for a in argv], {})


def test_diagnostics_settings_go_the_full_way(tmp_root: Path) -> None:
    """SCRUN_*DEBUG may be invalid or log something: the full path decides."""
    stored(tmp_root, "running", ME)
    assert None is answer(["--root", str(tmp_root), "state", "c1"], {"SCRUN_DEBUG": "x"})


@pytest.mark.parametrize("content", [
    b"{", b"[]", b'{"id": "c1"}', b'{"id": "c1", "bundle": "/b", "rootfs": "/r", '
    b'"status": "weird"}', b'{"id": "c1", "bundle": "/b", "rootfs": "/r", '
    b'"status": "running", "anchor_pid": "12"}',
])
def test_odd_records_go_the_full_way(tmp_root: Path, content: bytes) -> None:
    """A record the full path would call corrupt (or read with other types): None."""
    cdir = spool.make_container_dir(tmp_root, "c1")
    (cdir / spool.STATE_FILE).write_bytes(content)
    assert None is answer(["--root", str(tmp_root), "state", "c1"], {})


def test_keeps_unknown_record_fields_out(tmp_root: Path) -> None:
    """Fields of the record that are not in the OCI document stay out of it."""
    stored(tmp_root, "running", ME, job_id=5)
    line = answer(["--root", str(tmp_root), "state", "c1"], {})
    assert line is not None
    assert "job_id" not in json.loads(line)
