"""Signal argument parsing for `kill` (runc's rules).  Pure."""

from __future__ import annotations

import signal

from scrun_py.base.errors import ScrunError

SIGRTMAX = int(signal.SIGRTMAX)


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
        base = int(signal.SIGRTMIN if name.startswith("SIGRTMIN") else signal.SIGRTMAX)
        offset = name[9:]
        if offset.isascii() and offset.isdigit():
            num = base + int(offset) if name.startswith("SIGRTMIN") else base - int(offset)
            if int(signal.SIGRTMIN) <= num <= SIGRTMAX:
                return num
        raise ScrunError(f"invalid signal: {value}")
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ScrunError(f"unknown signal {value!r}") from None
