"""Console-script entry: the one choice of whether click is imported.

Engines call `--version` (podman info) and `create`/`start`/`delete` once per
container, and tools poll `state` often; importing click costs more than the work
itself.  The command lines cli/fast_path.py parses (those verbs, with any of their
options) run without it; everything else goes to the click CLI (help, usage, the other
verbs, and every usage error).  Both run the same verbs (commands/) with the same fatal
path.

Either way the process ends with `os._exit` once stdout/stderr are flushed: every log
write is unbuffered, and tearing down the interpreter (pydantic after `create`) only
delays the engine, which waits for us.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import NoReturn

_VERSION_ARGV = (["--version"], ["-v"], ["-V"], ["version"])


def _exit(code: int) -> NoReturn:
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        code = code or 1
    os._exit(code)


def main() -> NoReturn:
    argv = sys.argv[1:]
    if argv in _VERSION_ARGV:
        from scrun_py.base.version import version_text

        sys.stdout.write(version_text() + "\n")
        _exit(0)
    from scrun_py.cli import fast_path

    call = fast_path.parse(argv)
    if call is not None:
        _exit(fast_path.run(argv, call))
    from scrun_py.cli.click_app import main as cli_main

    try:
        cli_main(argv)
    except SystemExit as exc:
        code = exc.code
        _exit(code if isinstance(code, int) else (0 if code is None else 1))
