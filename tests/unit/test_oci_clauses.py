"""Clauses of the OCI runtime spec (runtime.md, config.md) and of runtime-tools' command-line
interface document that the OCI runtime-tools validation tests check, where the logic needs
no cluster: config.json's ociVersion at create, and a refused operation leaving the
container as it was (kill or start of a stopped container, delete of a running one).
The same clauses on the real cluster: tests/e2e/test_oci_clauses.py."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scrun_py.anchor.table import Phase
from scrun_py.base import procs
from scrun_py.base.errors import ContainerNotRunning, ContainerStillRunning
from scrun_py.container.handle import Container
from tests.unit.anchor_harness import Harness, run
from tests.unit.cli_run import run as run_cli
from tests.unit.cli_run import stored

IMPOSSIBLE_PID = 2 ** 22 + 1


def _bundle(tmp_path: Path, version: str) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({
        "ociVersion": version, "root": {"path": "rootfs"},
        "process": {"args": ["true"], "env": [], "cwd": "/"}}))
    return bundle


class TestCreateOciVersion:
    """config.md: ociVersion is SemVer 2.0.0; a runtime MUST generate an error when it
    meets an invalid or unsupported value (runtime-tools' misc_props: "invalid")."""

    @pytest.mark.parametrize(("version", "why"), [
        ("invalid", "is not a SemVer 2.0.0 version"),
        ("1.0", "is not a SemVer 2.0.0 version"),
        ("2.0.0", "is not supported (only 1.x)"),
    ])
    def test_refused_on_one_line_with_a_record_and_nothing_left(
            self, tmp_path: Path, tmp_root: Path, capsys: pytest.CaptureFixture[str],
            version: str, why: str) -> None:
        """Exit 1, one line naming the value, one error record in --log, no spool dir,
        no pid file."""
        bundle = _bundle(tmp_path, version)
        log, pid_file = tmp_path / "log.json", tmp_path / "c1.pid"
        code = run_cli(["--root", str(tmp_root), "--log", str(log), "--log-format", "json",
                        "create", "--bundle", str(bundle), "--pid-file", str(pid_file), "c1"])
        err = capsys.readouterr().err
        message = f"bundle {bundle}: config.json: ociVersion {version!r} {why}"
        assert (1, f"scrun-py: {message}\n") == (code, err)
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [("error", message)] == [(r["level"], r["msg"]) for r in records
                                        if r["level"] == "error"]
        assert [] == list(tmp_root.iterdir())
        assert not pid_file.exists()


class TestNoEffect:
    """runtime.md: kill of a container that is neither created nor running, start of one
    that is not created, and delete of one that is not stopped MUST generate an error and
    MUST have no effect on the container."""

    def test_kill_of_a_stopped_container(self, tmp_path: Path) -> None:
        """runc's `container not running`; the record (every field) is unchanged."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.STOPPED)
            before = h.state()
            for sig in (9, 15, 0):
                with pytest.raises(ContainerNotRunning):
                    h.lc.kill(sig)
            assert before == h.state()
            assert "signal" not in h.fake.names()

        run(body)

    def test_delete_of_a_running_container(self, tmp_path: Path) -> None:
        """runc's words; still running, nothing signalled, the record unchanged."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            h.until(lambda: h.state()["step_id"] is not None, "the step id is known")
            before = h.state()
            with pytest.raises(ContainerStillRunning):
                h.lc.delete(False)
            assert (Phase.RUNNING, before) == (h.lc.phase, h.state())
            assert h.dir.exists()
            assert "signal" not in h.fake.names()
            h.finish()

        run(body)

    @pytest.mark.parametrize("verb", [["kill", "c1", "KILL"], ["kill", "c1"], ["start", "c1"]])
    def test_state_document_unchanged_on_both_paths(
            self, tmp_root: Path, capsys: pytest.CaptureFixture[str], verb: list[str]) -> None:
        """kill/start of a stopped container fail, and `state` prints the same document
        before and after (the conformance suite's kill_no_effect compares the two
        documents)."""
        stored(tmp_root, "stopped", 0, exit_code=0, annotations={"a": "b"})
        argv = ["--root", str(tmp_root), "state", "c1"]
        before = Container(str(tmp_root), "c1").state_line()
        assert 0 == run_cli(argv)
        assert before == capsys.readouterr().out.strip()
        assert 1 == run_cli(["--root", str(tmp_root), *verb])
        err = capsys.readouterr().err
        assert ("container not running" if verb[0] == "kill"
                else "cannot start a container that has stopped") in err
        assert before == Container(str(tmp_root), "c1").state_line()
        assert 0 == run_cli(argv)
        assert before == capsys.readouterr().out.strip()


class TestStateDocument:
    """runtime.md "State": ociVersion, id, status, pid (on Linux, while created or
    running), bundle (absolute), annotations; a stopped container's pid is 0 (runc)."""

    def test_created_then_stopped(self, tmp_root: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
        pid = os.getpid()
        stored(tmp_root, "created", pid, anchor_start=procs.process_start_time(pid),
               oci_version="1.3.0", annotations={"org.example": ""})
        assert 0 == run_cli(["--root", str(tmp_root), "state", "c1"])
        doc = json.loads(capsys.readouterr().out)
        assert {"ociVersion": "1.3.0", "id": "c1", "status": "created", "pid": pid,
                "bundle": "/b/c1", "annotations": {"org.example": ""}}.items() <= doc.items()
        stored_dir = tmp_root / "c1"
        record = json.loads((stored_dir / "state.json").read_text())
        record.update(status="stopped", anchor_pid=IMPOSSIBLE_PID)
        (stored_dir / "state.json").write_text(json.dumps(record))
        assert 0 == run_cli(["--root", str(tmp_root), "state", "c1"])
        doc = json.loads(capsys.readouterr().out)
        assert ("stopped", 0, "1.3.0") == (doc["status"], doc["pid"], doc["ociVersion"])
