"""docs/*.md cite tests that exist: every test file (`test_x.py`, `tests/unit/test_x.py`,
`tests/e2e/test_engines*.py`), node id (`tests/e2e/test_x.py::TestFoo::test_bar`), test
class (`TestFoo`) and test function or method (`test_foo`) a page names is in tests/, and
every case id it names (S-09, BI-12, …) is a row of tests/reliability_cases.py.

A class or function is looked up in the test files cited in the same table row or
sentence; one cited with no file beside it is looked up in every file under tests/."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

from tests.reliability_cases import CASES

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DOCS = ROOT / "docs"

# A test file (a glob with `*` allowed; bare or from the repository's top) optionally
# followed by a node id's `::` parts; another path under tests/; a test class, a test
# function or method, or a test module's name without `.py`.
CITATION = re.compile(
    r"(?<![\w/.*-])(?P<file>(?:tests/[\w/.*-]*/)?test_[\w*]+\.py)(?P<parts>(?:::\w+)+)?(?![\w*])"
    r"|(?<![\w/.*-])(?P<path>tests/[\w/.*-]*[\w*/])"
    r"|(?<![\w/.*-])(?P<name>Test[A-Z]\w*|test_\w+)(?![\w/*])"
)
# The end of a sentence: . ! or ? (then any closing bracket, quote or backtick) and space.
SENTENCE_END = re.compile(r"[.!?][)\]`'\"]*\s+")
CASE_ID = re.compile(rf"\b(?:{'|'.join(sorted({c.id.split('-')[0] for c in CASES}))})-\d\d\b")


class Unit(NamedTuple):
    """A table row, a sentence or a code line of a page, with the page's line numbers."""

    text: str
    line_starts: tuple[tuple[int, int], ...]  # (offset in text, line number), ascending

    def line_at(self, offset: int) -> int:
        return next(line for start, line in reversed(self.line_starts) if start <= offset)


class Defs(NamedTuple):
    """The classes and functions of one test file."""

    every: frozenset[str]  # at any depth: functions, classes, methods
    tree: ast.Module


def _block_units(lines: list[tuple[int, str]]) -> Iterator[Unit]:
    """The sentences of a paragraph or list item (lines of (number, text))."""
    text, starts = "", []
    for number, line in lines:
        starts.append((len(text), number))
        text += line.strip() + "\n"
    begin = 0
    for m in [*SENTENCE_END.finditer(text), None]:
        end = m.end() if m else len(text)
        if text[begin:end].strip():
            yield Unit(text[begin:end], tuple((s - begin, n) for s, n in starts if s < end))
        begin = end


def units(text: str) -> Iterator[Unit]:
    """A page cut into table rows, code lines and sentences."""
    block: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        starts_block = (not stripped or fenced or stripped.startswith(("|", "#", "```"))
                        or re.match(r"([*+-]|\d+\.)\s", stripped) is not None)
        if starts_block and block:
            yield from _block_units(block)
            block = []
        if fenced or stripped.startswith(("|", "#", "```")):
            yield Unit(line, ((0, number),))
        elif stripped:
            block.append((number, line))
    if block:
        yield from _block_units(block)


@cache
def source_files() -> tuple[Path, ...]:
    return tuple(sorted(TESTS.rglob("*.py")))


@cache
def defs(path: Path) -> Defs:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = frozenset(node.name for node in ast.walk(tree)
                      if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))
    return Defs(names, tree)


def _files(pattern: str) -> list[Path]:
    """The files a citation names: a path from the repository's top, or a file name
    anywhere under tests/."""
    if pattern.startswith("tests/"):
        return sorted(ROOT.glob(pattern.rstrip("/")))
    return sorted(TESTS.rglob(pattern))


def _has_node(path: Path, parts: list[str]) -> bool:
    """path::parts[0]::parts[1]…: each part a class or function in the one before it."""
    body: list[ast.stmt] = defs(path).tree.body
    for part in parts:
        node = next((n for n in body if isinstance(n, ast.ClassDef | ast.FunctionDef
                                                   | ast.AsyncFunctionDef)
                     and n.name == part), None)
        if node is None:
            return False
        body = node.body
    return True


def _rel(paths: list[Path]) -> str:
    return ", ".join(str(p.relative_to(ROOT)) for p in paths)


def check(page: str, text: str) -> Iterator[str]:
    """One message per citation on the page that names no test in tests/."""
    modules = {p.stem for p in source_files()}
    for unit in units(text):
        found = list(CITATION.finditer(unit.text))
        scope = sorted({f for m in found if m["file"] or m["path"]
                        for f in _files(m["file"] or m["path"]) if f.suffix == ".py"})
        for m in found:
            where = f"{page}:{unit.line_at(m.start())}"
            cited = m["path"] or m["file"]
            if cited is not None:
                files = _files(cited)
                if not files:
                    yield f"{where}: `{cited}`: no such file under tests/"
                elif m["parts"] and not any(_has_node(f, m["parts"].split("::")[1:])
                                            for f in files):
                    yield f"{where}: `{m[0]}`: no {m['parts'][2:]} in {_rel(files)}"
                continue
            name = m["name"]
            if scope:
                if not any(name in defs(f).every for f in scope) and name not in modules:
                    yield f"{where}: `{name}` is in none of {_rel(scope)}"
            elif not any(name in defs(f).every for f in source_files()) and name not in modules:
                yield f"{where}: `{name}` is defined in no file under tests/"


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


class TestDocsCitedTests:
    def test_cited_tests_exist(self) -> None:
        """Every test file, class and function a page cites is in tests/."""
        problems = [msg for page in pages()
                    for msg in check(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8"))]
        assert [] == problems, "\n".join(problems)

    def test_cited_case_ids_exist(self) -> None:
        """Every case id a page cites is a row of the reliability table."""
        ids = {c.id for c in CASES}
        assert [] == [f"{page.relative_to(ROOT)}:{number}: {case} is not a case"
                      for page in pages()
                      for number, line in enumerate(page.read_text(encoding="utf-8")
                                                    .splitlines(), 1)
                      for case in CASE_ID.findall(line) if case not in ids]

    def test_pages_cite_tests(self) -> None:
        """The pages' file and name citations are found (a pattern that matched none
        would pass above)."""
        kinds: dict[str, int] = {"file": 0, "name": 0}
        for page in pages():
            for unit in units(page.read_text(encoding="utf-8")):
                for m in CITATION.finditer(unit.text):
                    for kind in kinds:
                        kinds[kind] += m[kind] is not None
        assert [] == [kind for kind, n in kinds.items() if n == 0], kinds


class TestCheck:
    """check() on made-up pages, against the real tests/."""

    def test_row_resolves_against_its_files(self) -> None:
        """A class in the row's file passes; one only in another file fails."""
        row = ("| x | unit `test_staging_trust.py` `TestDirectoryNames`; "
               "`test_spool.py` `TestNoSuchClass` |\n")
        assert ["p.md:1: `TestNoSuchClass` is in none of tests/unit/test_spool.py, "
                "tests/unit/test_staging_trust.py"] == list(check("p.md", row))

    def test_name_in_another_file_than_the_cited_one(self) -> None:
        text = "Intro.\n\nSee `test_spool.py`\nand `TestDirectoryNames`. Next.\n"
        assert ["p.md:4: `TestDirectoryNames` is in none of tests/unit/test_spool.py"] \
            == list(check("p.md", text))

    def test_sentence_without_a_file_looks_everywhere(self) -> None:
        text = "See `test_spool.py`. Then `TestDirectoryNames` and `test_nope_nothing`.\n"
        assert ["p.md:1: `test_nope_nothing` is defined in no file under tests/"] \
            == list(check("p.md", text))

    def test_files_and_node_ids(self) -> None:
        text = ("* `tests/e2e/test_release.py::TestCreateStartMode`,\n"
                "  `tests/e2e/test_engines*.py`, `tests/unit/test_gone.py`, `test_gone.py`,\n"
                "  `tests/e2e/test_release.py::TestCreateStartMode::test_gone`\n"
                "  (tests/unit/test_imports.py, test_imports, `tests/spank/`)\n")
        assert ["p.md:2: `tests/unit/test_gone.py`: no such file under tests/",
                "p.md:2: `test_gone.py`: no such file under tests/",
                "p.md:3: `tests/e2e/test_release.py::TestCreateStartMode::test_gone`: no "
                "TestCreateStartMode::test_gone in tests/e2e/test_release.py"] \
            == list(check("p.md", text))
