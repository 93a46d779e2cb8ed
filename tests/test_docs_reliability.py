"""docs/reliability.md, tests/reliability_cases.py and the tests' `case` markers agree:
every case has a test, every test's case is in the table, the doc shows the table."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tests.reliability_cases import BEGIN, CASES, DOC, END, doc_block, render

TESTS = Path(__file__).resolve().parent


def _marked_cases() -> dict[str, list[str]]:
    """Case id -> tests that carry `pytest.mark.case(id)` (found without importing them)."""
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for call in (n for d in node.decorator_list for n in ast.walk(d)):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "case"
                        and isinstance(call.func.value, ast.Attribute)
                        and call.func.value.attr == "mark"):
                    assert 1 == len(call.args), f"{path}:{call.lineno}: case(ID) takes one id"
                    arg = call.args[0]
                    assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), \
                        f"{path}:{call.lineno}: the case id must be a string literal"
                    found.setdefault(arg.value, []).append(
                        f"{path.relative_to(TESTS.parent)}::{node.name}")
    return found


class TestDocsReliability:
    def test_ids_unique_and_ordered(self) -> None:
        """Case ids are unique; each area's ids are numbered 01, 02, … in order."""
        ids = [c.id for c in CASES]
        assert [] == [i for i, n in Counter(ids).items() if n > 1]
        for prefix in sorted({i.split("-")[0] for i in ids}):
            numbers = [int(i.split("-")[1]) for i in ids if i.split("-")[0] == prefix]
            assert list(range(1, len(numbers) + 1)) == numbers, prefix

    def test_every_case_has_a_test(self) -> None:
        """A case in the table that no test carries is a promise nobody checks."""
        marked = _marked_cases()
        assert [] == [c.id for c in CASES if c.id not in marked]

    def test_every_marked_test_is_in_the_table(self) -> None:
        """A test naming a case that the table (and so the doc) does not list."""
        table = {c.id for c in CASES}
        assert [] == sorted(f"{i}: {t}" for i, tests in _marked_cases().items()
                            if i not in table for t in tests)

    def test_doc_shows_the_table(self) -> None:
        """docs/reliability.md carries exactly the generated table
        (regenerate: python -m tests.reliability_cases)."""
        text = DOC.read_text(encoding="utf-8")
        block = doc_block(text)
        assert block is not None, f"{DOC} has no {BEGIN} … {END} block"
        assert render() == block

    def test_enough_bad_inputs(self) -> None:
        """The table holds at least 25 distinct bad-input cases."""
        assert 25 <= len([c for c in CASES if c.id.startswith("BI-")])
