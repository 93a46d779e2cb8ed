"""docs/levels.md holds the tables of scrun_py/base/flags.py verbatim (regenerate the block with
`python -m scrun_py.base.flags`)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import re
from pathlib import Path

from scrun_py.base import flags

DOC = Path(__file__).resolve().parents[2] / "docs" / "levels.md"


class TestLevelsDoc:
    def test_generated_block_is_current(self) -> None:
        """The block between the markers is exactly flags.render_markdown()."""
        text = DOC.read_text(encoding="utf-8")
        match = re.search(re.escape(flags.DOC_BEGIN) + r"\n(.*?)\n" + re.escape(flags.DOC_END),
                          text, re.S)
        assert match is not None
        assert flags.render_markdown() == match.group(1)

    def test_every_source_and_flag_in_doc(self) -> None:
        """Every level source, level word and flag name appears in the page."""
        text = DOC.read_text(encoding="utf-8")
        names = [s.name for s in flags.LEVEL_SOURCES] + list(flags.LADDER) + [
            n for f in flags.FLAGS for n in f.names]
        assert [] == [n for n in names if f"`{n}`" not in text]
