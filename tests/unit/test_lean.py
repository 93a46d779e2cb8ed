"""The lean-import rules of scrun_py/base/lean.py: every module's `TYPE_CHECKING = False`
line points there, and no module imports it (it is documentation)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import re
from pathlib import Path

from scrun_py.base.lean import TYPE_CHECKING_NOTE

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "scrun_py"
LINE = re.compile(r"^TYPE_CHECKING = False(.*)$", re.MULTILINE)
def _modules() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE_DIR)): p.read_text(encoding="utf-8")
            for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def test_every_type_checking_line_points_to_lean() -> None:
    found = {name: LINE.findall(text) for name, text in _modules().items()}
    assert len([n for n, lines in found.items() if lines]) > 30  # the scan sees them
    offenders = sorted(name for name, lines in found.items()
                       for tail in lines if tail.strip() != TYPE_CHECKING_NOTE)
    assert [] == offenders


def test_no_module_imports_lean() -> None:
    """base/lean.py is read, never imported: the hot paths must not pay for its text."""
    importers = sorted(name for name, text in _modules().items()
                       if re.search(r"^\s*(from scrun_py\.base import lean|"
                                    r"(from|import) scrun_py\.base\.lean)\b", text, re.M))
    assert [] == importers
