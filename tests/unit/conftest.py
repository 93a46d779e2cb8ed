"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def tmp_root(tmp_path: Path) -> Path:
    """An empty --root, 0700 as create makes it (test_spool and test_store make theirs
    through the module under test)."""
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    return root
