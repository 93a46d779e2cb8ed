"""The import graph of scrun_py, built from the source with ast (module-level and
function-level imports, those under `if TYPE_CHECKING:` too: tests/unit/test_imports.py
`imports_of`): the packages import one way, down the layers docs/architecture.md draws,
and no two modules of a package import each other (directly or round a longer circle)
but those KNOWN_CYCLES names."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import pytest

from tests.unit.test_imports import _modules, imports_of

#: the layers, top first; a package imports its own layer's (without a circle) and those
#: below.  "" is scrun_py/__init__.py (the version numbers), "entry" and "__main__" the
#: modules beside it.  docs/architecture.md draws the same picture.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("entry", "__main__"), ("cli",), ("commands",), ("anchor", "oci", "site", "hooks"),
    ("container", "slurm"), ("base",), ("",))

#: circles inside a package that stay, and why
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def package_of(module: str) -> str:
    """`scrun_py.slurm.argv` → "slurm"; `scrun_py.entry` → "entry"; `scrun_py` → ""."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_graph() -> dict[str, set[str]]:
    """Every module of scrun_py → the modules of scrun_py it imports."""
    modules = _modules()
    return {m: {name for name in imports_of(m) if name in modules and name != m}
            for m in modules}


def package_graph() -> dict[str, set[str]]:
    """Every package → the other packages its modules import."""
    graph: dict[str, set[str]] = {package_of(m): set() for m in _modules()}
    for module, targets in module_graph().items():
        graph[package_of(module)] |= {package_of(t) for t in targets} - {package_of(module)}
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of `graph` with more than one node (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _layer(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


class TestBetweenPackages:
    def test_no_cycle(self) -> None:
        assert set() == cycles(package_graph())

    def test_every_package_has_a_layer(self) -> None:
        assert set() == set(package_graph()) - {p for layer in LAYERS for p in layer}

    def test_imports_go_down(self) -> None:
        """No package imports one of a layer above its own."""
        up = sorted(f"{a} -> {b}" for a, targets in package_graph().items() for b in targets
                    if _layer(b) < _layer(a))
        assert [] == up

    def test_slurm_imports_only_base(self) -> None:
        """slurm/ knows nothing of bundles, site files or the anchor: the anchor hands it
        what it needs (StepRequest.rootfs_problem)."""
        assert {"base"} == package_graph()["slurm"]


class TestInPackages:
    @pytest.mark.parametrize("pair", [("scrun_py.hooks.interface", "scrun_py.hooks.lua"),
                                      ("scrun_py.site.site_conf", "scrun_py.site.trust")])
    def test_former_circles_stay_open(self, pair: tuple[str, str]) -> None:
        """lua.py takes the context from hooks/context.py, not interface.py; the [trust]
        keys are base/layout.py's, so site_conf.py does not import trust.py."""
        assert [] == [c for c in cycles(module_graph()) if set(pair) <= c]

    def test_no_new_cycle(self) -> None:
        assert set() == cycles(module_graph()) - KNOWN_CYCLES

    def test_known_cycles_are_still_there(self) -> None:
        """A circle that is gone leaves KNOWN_CYCLES."""
        assert set() == KNOWN_CYCLES - cycles(module_graph())


class TestTheGraph:
    def test_cycles_are_found(self) -> None:
        graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
        assert {frozenset("abc")} == cycles(graph)

    def test_lazy_imports_are_edges(self) -> None:
        """hooks/interface.py imports lua.py inside load_hooks: the graph has it."""
        assert "scrun_py.hooks.lua" in module_graph()["scrun_py.hooks.interface"]


class TestThePicture:
    """docs/architecture.md opens with the layers: its picture is LAYERS."""

    @staticmethod
    def _drawn() -> tuple[frozenset[str], ...]:
        from pathlib import Path

        doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
        block = doc.split("```text\n", 1)[1].split("```", 1)[0]
        layers = []
        for line in block.splitlines()[2:]:  # under the header and its rule
            column = line[:32].strip()
            if not column or column[0] in "│▼─":
                continue
            layers.append(frozenset(
                "" if word == "scrun_py/__init__.py" else word.removesuffix("/")
                .removesuffix(".py") for word in column.split()))
        return tuple(layers)

    def test_picture_is_the_layers(self) -> None:
        assert tuple(frozenset(layer) for layer in LAYERS) == self._drawn()

    def test_picture_comes_first(self) -> None:
        from pathlib import Path

        doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
        assert doc.startswith("# Architecture\n\n```text\n")
