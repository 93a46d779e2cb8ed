"""ruff and mypy (strict) are part of the test suite, so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (pip install -e '.[test]')")
    return found


class TestLint:
    def test_ruff(self) -> None:
        """ruff finds nothing in the package and the tests."""
        res = subprocess.run([_tool("ruff"), "check", "scrun_py", "tests", "bench"], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
        assert 0 == res.returncode, res.stdout + res.stderr

    def test_mypy_strict(self) -> None:
        """mypy --strict (configured in pyproject.toml) is clean for scrun_py."""
        res = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True,
                             timeout=600)
        assert 0 == res.returncode, res.stdout + res.stderr

    def test_mypy_fake_slurm_fits_the_interface(self) -> None:
        """FakeSlurm, the contract suite and its runs type-check strictly: `as_backend`
        returns FakeSlurm as a SlurmBackend, so a method that drifts from the interface
        (scrun_py/slurm/backend.py) is an error here."""
        files = ["tests/unit/fake_slurm.py", "tests/backend_contract.py",
                 "tests/unit/test_backend_contract.py", "tests/unit/test_pyslurm_backend.py"]
        res = subprocess.run([_tool("mypy"), "--strict", *files], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
        assert 0 == res.returncode, res.stdout + res.stderr
