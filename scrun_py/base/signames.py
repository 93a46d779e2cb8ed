"""Signal argument parsing for `kill` (runc's rules).  Pure."""

from __future__ import annotations

# the C module: signal.py builds its enums at import (with enum and collections: 3 ms
# of import time, in a `kill` of ~12); its constants are the same numbers
import _signal  # type: ignore[import-not-found]  # (no stub: the C module of signal)

from scrun_py.base.errors import ScrunError

SIGRTMIN = int(_signal.SIGRTMIN)
SIGRTMAX = int(_signal.SIGRTMAX)
# the signals base/procs.py sends or restores
SIGKILL = int(_signal.SIGKILL)
SIGPIPE = int(_signal.SIGPIPE)
SIGXFSZ = int(_signal.SIGXFSZ)


def parse_signal(value: str) -> int:
    """A number, or a name with or without SIG, any case; 1 <= n <= SIGRTMAX."""
    text = value.strip()
    if not text:
        raise ScrunError("invalid signal: empty")
    # isascii: str.isdigit() is also true for '²' and other digits int() rejects or
    # that runc would not take as a number.
    if text.isascii() and text.isdigit():
        num = int(text)
        if not 1 <= num <= SIGRTMAX:
            raise ScrunError(f"invalid signal: {value}")
        return num
    name = text.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    if name.startswith("SIGRTMIN+") or name.startswith("SIGRTMAX-"):
        base = SIGRTMIN if name.startswith("SIGRTMIN") else SIGRTMAX
        offset = name[9:]
        if offset.isascii() and offset.isdigit():
            num = base + int(offset) if name.startswith("SIGRTMIN") else base - int(offset)
            if SIGRTMIN <= num <= SIGRTMAX:
                return num
        raise ScrunError(f"invalid signal: {value}")
    # the names signal.Signals has: SIG*, not the SIG_* handler and mask constants
    found = getattr(_signal, name, None) if not name.startswith("SIG_") else None
    if not isinstance(found, int):
        raise ScrunError(f"unknown signal {value!r}")
    return found
