"""docs/architecture.md matches the code: its state table is anchor/table.py's TABLE and
every module it names exists."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import re
from pathlib import Path

from scrun_py.anchor.table import TABLE, Event, Phase

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _doc_table() -> dict[tuple[str, str], str]:
    lines = [ln for ln in DOC.splitlines() if ln.startswith("| ")]
    header = next(ln for ln in lines if ln.startswith("| event \\ phase |"))
    phases = [c.strip() for c in header.strip("|").split("|")[1:]]
    out = {}
    for ln in lines[lines.index(header) + 1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if cells[0] not in {e.value for e in Event}:
            break
        out.update({(ph, cells[0]): cell for ph, cell in zip(phases, cells[1:], strict=True)
                    if cell})
    return out


def _cell(phase: Phase, event: Event) -> str:
    t = TABLE[phase, event]
    return t.action.value if t.next is phase else f"→ {t.next.value}: {t.action.value}"


class TestArchitectureDoc:
    def test_state_table_is_the_code(self) -> None:
        expected = {(p.value, e.value): _cell(p, e) for p, e in TABLE}
        assert expected == _doc_table()

    def test_named_modules_exist(self) -> None:
        block = DOC.split("## Modules", 1)[1].split("```")[1]
        missing = []
        for line in block.splitlines():
            if not line or line[0].isspace():
                continue  # a description's continuation
            names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].replace(",", " ").split()
            prefix = ""
            for name in names:
                if "/" in name:
                    prefix, _, _ = name.rpartition("/")
                    path = name
                else:
                    path = f"{prefix}/{name}" if prefix else name
                if "<" in path or "*" in path:
                    continue
                if not any((ROOT / "scrun_py" / cand).exists()
                           for cand in (f"{path}.py", path, f"{name}.py")):
                    missing.append(name)
        assert [] == missing

    def test_named_files_exist(self) -> None:
        paths = set(re.findall(r"`((?:[\w.]+/)*[\w.]+\.py)`", DOC))
        assert [] == sorted(p for p in paths if not any(
            (base / p).exists() for base in (ROOT, ROOT / "scrun_py")))
