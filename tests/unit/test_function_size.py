"""No function of scrun_py or of the benches (bench/) is longer than 50 lines, and none
takes more than 6 parameters (self and cls not counted; *args and **kwargs count as one
each; ruff's max-args checks the same).  A longer
function is split into named steps; related parameters are grouped into a record
(base/records.py), or, in a module `state` imports, a TypedDict that only mypy reads."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "scrun_py"
BENCH_DIR = REPO / "bench"
MAX_LINES = 50
MAX_PARAMS = 6

#: functions that still break the rule, each with why it waits ("module.py:function").
#: Temporary: an entry goes once its function is within the limits (the test says so).
ALLOWED: dict[str, str] = {}


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    if names and names[0] in ("self", "cls", "mcs"):
        names = names[1:]
    return (len(names) + len(args.kwonlyargs) + (args.vararg is not None)
            + (args.kwarg is not None))


def _sources() -> list[tuple[str, Path]]:
    """Each module scanned, by its key: the package's as "module.py", the benches' as
    "bench/module.py"."""
    return ([(p.relative_to(PACKAGE_DIR).as_posix(), p)
             for p in sorted(PACKAGE_DIR.rglob("*.py"))]
            + [(p.relative_to(REPO).as_posix(), p) for p in sorted(BENCH_DIR.rglob("*.py"))])


def _functions() -> dict[str, tuple[int, int]]:
    """Each function of the package and the benches ("module.py:name", nested ones by
    their own name): its length in lines (decorators not counted) and its parameters."""
    found: dict[str, tuple[int, int]] = {}
    for module, path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                size = (node.end_lineno - node.lineno + 1, _parameters(node))
                key = f"{module}:{node.name}"
                found[key] = max(found.get(key, size), size)
    return found


def _too_big() -> dict[str, str]:
    return {name: f"{lines} lines, {params} parameters"
            for name, (lines, params) in _functions().items()
            if lines > MAX_LINES or params > MAX_PARAMS}


def test_functions_are_short_and_take_few_parameters() -> None:
    """Every function but the allowed ones is at most 50 lines and takes at most 6
    parameters."""
    assert {} == {name: why for name, why in _too_big().items() if name not in ALLOWED}


def test_allow_list_is_current() -> None:
    """Each allowed function still exists and still breaks the rule (else its entry
    goes)."""
    assert [] == sorted(set(ALLOWED) - set(_too_big()))


def test_the_benches_are_scanned() -> None:
    """bench/ is held to the same rule as the package."""
    assert "bench/run.py:main" in _functions()


def test_the_scan_counts_as_the_rule_says() -> None:
    """self/cls are not counted, *args and **kwargs count as one each, keyword-only
    parameters count."""
    tree = ast.parse("class C:\n"
                     "    def f(self, a, /, b, *args, c, d=1, **kw):\n"
                     "        pass\n")
    method = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    assert 6 == _parameters(method)
