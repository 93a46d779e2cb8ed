"""Docs tests: docs/hooks.md covers every hook, every slurm.* function and every constant."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from pathlib import Path

from scrun_py.hooks.contract import HOOKS, JSON_MODULE_API, SLURM_API, SLURM_CONSTANTS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "hooks.md"


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


class TestDocsHooks:
    def test_every_hook_with_signature(self) -> None:
        """Every hook has a heading with its full Slurm signature."""
        text = doc_text()
        assert [] == [name for name, spec in HOOKS.items()
                      if f"### `{name}({', '.join(spec.args)})`" not in text]

    def test_every_slurm_function_with_signature(self) -> None:
        """Every slurm.* function appears with its signature in backticks."""
        text = doc_text()
        assert [] == [name for name, sig in SLURM_API.items() if f"`{sig}`" not in text]

    def test_every_json_module_function(self) -> None:
        """The require 'json' functions appear with their signatures."""
        text = doc_text()
        assert [] == [name for name, sig in JSON_MODULE_API.items() if f"`{sig}`" not in text]

    def test_every_constant(self) -> None:
        """Every constant in the slurm table is listed."""
        text = doc_text()
        assert [] == [name for name in [*SLURM_CONSTANTS, "CLUSTER_NAME"]
                      if f"`{name}`" not in text]

    def test_api_names_match_signatures(self) -> None:
        """Each SLURM_API signature starts with slurm.<its name>(."""
        assert [] == [name for name, sig in SLURM_API.items()
                      if not sig.startswith(f"slurm.{name}(")]
