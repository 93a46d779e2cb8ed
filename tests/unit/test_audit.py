"""Unit tests for scrun_py.site.audit: the settings, who a record names, and which files
a record may be written to on a shared host (where other users may have made
the file or its directory first)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import ConfigError
from scrun_py.site import audit, site_conf


def _settings(tmp_path: Path, text: str) -> audit.AuditSettings:
    (tmp_path / "scrun-py.toml").write_text(text)
    return audit.load_settings(tmp_path / "slurm.conf",
                               site_conf.load(tmp_path / "slurm.conf", tmp_path / "none.toml"))


class TestSettings:
    def test_syslog_is_the_default_sink(self, tmp_path: Path) -> None:
        """An [audit] table alone sends records to syslog; no table, no audit."""
        assert audit.AuditSettings(syslog=True) == _settings(tmp_path, "[audit]\n")
        assert not _settings(tmp_path, "").enabled
        assert audit.AuditSettings(file="/a", syslog=False) == _settings(
            tmp_path, '[audit]\nfile = "/a"\nsyslog = false\n')

    @pytest.mark.parametrize("file", ["/log/{home}.jsonl", "/log/{user", "/log/{}"])
    def test_unknown_placeholder(self, tmp_path: Path, file: str) -> None:
        with pytest.raises(ConfigError, match=r"\[audit\] file: the only placeholders"):
            _settings(tmp_path, f'[audit]\nfile = "{file}"\n')


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class TestRealUser:
    def test_namespace_root_is_recorded_as_the_real_user(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """As root of a user namespace whose 0 is uid 1001 outside (rootless podman), the
        record names uid 1001, not root."""
        monkeypatch.setattr(os, "getuid", lambda: 0)
        monkeypatch.setattr(procs, "_id_map", lambda kind: [(0, 1001, 1), (1, 100000, 65536)])
        monkeypatch.setattr(procs, "user_name", lambda uid: {1001: "alice"}.get(uid, "?"))
        path = tmp_path / "{uid}.jsonl"
        audit.record(audit.AuditSettings(file=str(path)), "kill", container_id="c1")
        (rec,) = _records(tmp_path / "1001.jsonl")
        assert ("alice", 1001) == (rec["user"], rec["uid"])

    def test_initial_namespace_root_is_root(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(os, "getuid", lambda: 0)
        monkeypatch.setattr(procs, "_id_map", lambda kind: [(0, 0, 4294967295)])
        assert 0 == procs.real_uid()


class TestFiles:
    def test_shared_file_is_not_created(self, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
        """A shared file the site did not make is not made by the first user (it would be
        theirs alone): a warning, nothing created."""
        path = tmp_path / "audit.jsonl"
        audit.record(audit.AuditSettings(file=str(path)), "kill", container_id="c1")
        assert not path.exists()
        assert "does not exist (the site creates the shared audit file)" in (
            capsys.readouterr().err)

    def test_shared_file_made_by_the_site(self, tmp_path: Path) -> None:
        path = tmp_path / "audit.jsonl"
        path.touch(mode=0o622)
        audit.record(audit.AuditSettings(file=str(path)), "kill", container_id="c1")
        audit.record(audit.AuditSettings(file=str(path)), "delete", container_id="c1")
        assert ["kill", "delete"] == [r["event"] for r in _records(path)]

    def test_per_user_file_created_private(self, tmp_path: Path) -> None:
        audit.record(audit.AuditSettings(file=str(tmp_path / "{user}.jsonl")), "kill",
                     container_id="c1")
        path = tmp_path / f"{procs.user_name(procs.real_uid())}.jsonl"
        assert 0o600 == stat.S_IMODE(path.stat().st_mode)
        assert ["kill"] == [r["event"] for r in _records(path)]

    def test_per_user_file_planted_as_symlink(self, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
        """A symlink planted at a user's file is not followed."""
        target = tmp_path / "target"
        target.write_text("")
        (tmp_path / f"{procs.real_uid()}.jsonl").symlink_to(target)
        audit.record(audit.AuditSettings(file=str(tmp_path / "{uid}.jsonl")), "kill",
                     container_id="c1")
        assert "" == target.read_text()
        assert "warning: audit file" in capsys.readouterr().err

    def test_per_user_file_made_by_another_user(self, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
        """A user's file that another user made first (to read or rewrite the records)
        is not written to."""
        if os.geteuid() != 0:
            pytest.skip("giving a file to another uid needs root")
        path = tmp_path / f"{procs.real_uid()}.jsonl"
        path.touch(mode=0o666)
        os.chown(path, 65534, 65534)
        audit.record(audit.AuditSettings(file=str(tmp_path / "{uid}.jsonl")), "kill",
                     container_id="c1")
        assert "" == path.read_text()
        assert "belongs to another user: not written" in capsys.readouterr().err


class TestVerbRecords:
    """start and kill write their record before the anchor acts (the container may exit,
    and the anchor write `exit`, before the verb returns), and `-failed` after it."""

    @pytest.fixture
    def trail(self, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, object]]]:
        from scrun_py import commands

        seen: list[tuple[str, dict[str, object]]] = []
        monkeypatch.setattr(commands, "audit",
                            lambda inv, event, **fields: seen.append((event, fields)))
        return seen

    def test_record_before_the_act(self, trail: list[tuple[str, dict[str, object]]]) -> None:
        from scrun_py import commands

        commands.audited(None, "kill", lambda: trail.append(("act", {})),  # type: ignore[arg-type]
                         container_id="c1", signal=10)
        assert [("kill", {"container_id": "c1", "signal": 10}), ("act", {})] == trail

    def test_failed_act(self, trail: list[tuple[str, dict[str, object]]]) -> None:
        from scrun_py import commands
        from scrun_py.base.errors import ContainerNotRunning

        def act() -> None:
            raise ContainerNotRunning()

        with pytest.raises(ContainerNotRunning):
            commands.audited(None, "kill", act, container_id="c1", signal=9)  # type: ignore[arg-type]
        assert ["kill", "kill-failed"] == [event for event, _ in trail]
        assert {"container_id": "c1", "signal": 9, "error": str(ContainerNotRunning())} \
            == trail[1][1]
