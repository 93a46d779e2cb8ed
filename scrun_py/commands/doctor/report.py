"""What one check found (`Check`: ok / warning / failed / skipped, what was found, how to
fix it), and the report: the table of `scrun-py doctor` or its JSON list."""

from __future__ import annotations

from dataclasses import asdict, dataclass

OK, WARN, FAIL, SKIP = "ok", "warning", "failed", "skipped"
_MARK = {OK: "✔", WARN: "!", FAIL: "✘", SKIP: "-"}


@dataclass
class Check:
    name: str
    status: str
    found: str
    fix: str = ""

    @property
    def fatal(self) -> bool:
        return self.status == FAIL


def render_table(checks: list[Check]) -> str:
    """One line per check (its mark, name and what it found), and a `fix:` line under
    each that is not ok and says how to fix it."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        line = f"{_MARK[c.status]} {c.name.ljust(width)}  {c.found}"
        if c.fix and c.status != OK:
            line += f"\n  {' ' * width}  fix: {c.fix}"
        lines.append(line)
    return "\n".join(lines)


def as_json(checks: list[Check]) -> list[dict[str, str]]:
    return [asdict(c) for c in checks]
