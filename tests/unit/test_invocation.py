"""invocation.default_root: where containers are kept when --root is not given (podman
gives none)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrun_py.base import invocation
from scrun_py.base.invocation import Invocation, default_root


class TestDefaultRoot:
    def test_the_runtime_dir(self) -> None:
        assert "/run/user/1000/scrun" == default_root({"XDG_RUNTIME_DIR": "/run/user/1000"},
                                                      uid=1000)

    def test_root_without_a_runtime_dir(self) -> None:
        assert "/run/scrun" == default_root({}, uid=0)

    def test_the_users_run_dir_when_writable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(os, "access", lambda path, mode: path == "/run/user/1234")
        assert "/run/user/1234/scrun" == default_root({}, uid=1234)

    def test_tmp_as_the_last_resort(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(os, "access", lambda path, mode: False)
        assert "/var/tmp/scrun-1234" == default_root({"TMPDIR": "/var/tmp"}, uid=1234)
        assert "/tmp/scrun-1234" == default_root({}, uid=1234)

    def test_resolve_uses_it_without_root(self, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        assert str(tmp_path / "scrun") == Invocation.resolve(root=None).root_dir
        assert str(tmp_path / "r") == Invocation.resolve(root=tmp_path / "r").root_dir
        assert invocation.default_root() == str(tmp_path / "scrun")
