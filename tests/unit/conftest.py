"""Fixtures shared by the unit tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrun_py.slurm import cli_backend
from tests.unit.fake_slurm import FakeSlurm


@pytest.fixture
def tmp_root(tmp_path: Path) -> Path:
    """An empty --root, 0700 as create makes it (test_spool and test_store make theirs
    through the module under test)."""
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    return root


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """The in-process fake in place of the CLI backend, for an anchor run in this
    process or forked from it; the variables that would steer it away cleared."""
    backend = FakeSlurm()
    monkeypatch.setattr(cli_backend, "CliSlurm", lambda **_kw: backend)
    monkeypatch.setenv("SCRUN_PY_SLURM_BACKEND", "cli")
    for var in ("SLURM_JOB_ID", "SCRUN_PY_LUA", "SCRUN_PY_ALLOC_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    return backend


@pytest.fixture
def scancel_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `scancel` first on PATH that records its arguments; the file it writes them
    to (missing while it has not run)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    seen = tmp_path / "scancel.args"
    (bindir / "scancel").write_text(f'#!/bin/sh\necho "$@" > {seen}\n')
    (bindir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return seen
