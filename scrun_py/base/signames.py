"""Signal numbers and handlers without signal.py, the relay of signals to a child, and
signal argument parsing for `kill` (runc's rules).

signal.py builds its enums at import (with enum and collections; its cost in a `kill`
and in the anchor: base/lean.py). The C module under it has the same numbers and the
same `signal()`.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # (no stub: the C module of signal)

from scrun_py.base.errors import ScrunError

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import FrameType
    from typing import Protocol

    class Signallable(Protocol):
        """A child process: subprocess.Popen, procs.Spawned, launch.AnchorProcess."""

        returncode: int | None

        def send_signal(self, signum: int) -> None: ...

SIGRTMIN = int(_signal.SIGRTMIN)
SIGRTMAX = int(_signal.SIGRTMAX)
SIGHUP = int(_signal.SIGHUP)
SIGINT = int(_signal.SIGINT)
SIGKILL = int(_signal.SIGKILL)
SIGPIPE = int(_signal.SIGPIPE)
SIGTERM = int(_signal.SIGTERM)
SIGXFSZ = int(_signal.SIGXFSZ)


def number(name: str) -> int:
    """The number of the signal `name` ("SIGQUIT")."""
    return int(getattr(_signal, name))


def set_handler(sig: int, handler: Callable[[int, FrameType | None], None]) -> None:
    """signal.signal(sig, handler); call from the main thread."""
    _signal.signal(sig, handler)


def ignore(sig: int) -> None:
    """signal.signal(sig, SIG_IGN)."""
    _signal.signal(sig, _signal.SIG_IGN)


class Relay:
    """Signals to this process that go on to a child (`child`, once it is set) while it
    runs; one that arrives before the child is set, or once it has been reaped, is
    dropped.  The one relay of create (to the anchor) and exec's supervisor with a
    terminal (to srun)."""

    def __init__(self, signals: Iterable[int], child: Signallable | None = None) -> None:
        self.child = child
        for sig in signals:
            set_handler(sig, self._forward)

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        child = self.child
        if child is None or child.returncode is not None:
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:  # exited, not yet reaped
            pass


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
