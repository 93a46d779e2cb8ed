"""Running the click CLI in-process, as the console script does (shared by the CLI tests)."""

from __future__ import annotations

import pytest

from scrun_py import cli


def run(argv: list[str]) -> int:
    """Run the CLI like the console script does and return its exit status."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    code = info.value.code
    return code if isinstance(code, int) else (0 if code is None else 1)

