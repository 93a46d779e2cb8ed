"""Console-script entry: answers the hottest commands without importing click.

Engines call `--version` (podman info) and tools poll `state` often; click costs
more than the work itself.  Only exact, simple argv shapes take the fast path;
everything else goes to the click CLI, which stays the single source of truth.
"""

from __future__ import annotations

import sys
from typing import NoReturn

_VERSION_ARGV = (["--version"], ["-v"], ["-V"], ["version"])
_STATE_GLOBALS = ("--root", "--log", "--log-format")


def _fast_state(argv: list[str]) -> dict[str, str] | None:
    """{'--root': …, 'id': …} for `[--root R] [--log L] [--log-format F] state ID`."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        name, eq, value = argv[i].partition("=")
        if name not in _STATE_GLOBALS or name in opts:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        opts[name] = value
        i += 1
    rest = argv[i:]
    if len(rest) != 2 or rest[0] != "state" or rest[1].startswith("-"):
        return None
    if opts.get("--log-format", "text") not in ("text", "json"):
        return None
    opts["id"] = rest[1]
    return opts


def main() -> NoReturn:
    argv = sys.argv[1:]
    if argv in _VERSION_ARGV:
        from scrun_py import version_text

        sys.stdout.write(version_text() + "\n")
        sys.exit(0)
    opts = _fast_state(argv)
    if opts is not None:
        import os
        from pathlib import Path

        from scrun_py.commands import state
        from scrun_py.errors import ScrunError
        from scrun_py.logs import fatal_record
        from scrun_py.settings import Invocation, default_root

        root = Path(os.path.abspath(opts["--root"])) if opts.get("--root") else default_root()
        log = Path(opts["--log"]) if opts.get("--log") else None
        fmt = opts.get("--log-format", "text")
        try:
            state.run(Invocation(root=root, log_path=log, log_format=fmt), opts["id"])
        except ScrunError as exc:
            fatal_record(str(exc), log, fmt)
            sys.exit(exc.exit_code)
        sys.exit(0)
    from scrun_py.cli import main as cli_main

    cli_main(argv)
