"""The anchor's concurrency, in one home: daemon threads, and waits that a stop request
can cut short.

The anchor runs on plain threads, not an event loop: one anchor runs per container, and
asyncio (with what it imports) would add its memory to every one of them
(base/lean.py).  Every thread
is a daemon: a call that hangs (a Lua hook, a Slurm command) never keeps the anchor
alive once it has decided to exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any, TypeVar
    T = TypeVar("T")


class Cancelled(Exception):
    """A wait was given up because its `Cancel` was set."""


class Cancel:
    """A one-way flag that wakes every wait tied to it (`sleep`, `call`)."""

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._linked: set[threading.Event] = set()

    def set(self) -> None:
        with self._lock:
            self._flag.set()
            for ev in self._linked:
                ev.set()

    def is_set(self) -> bool:
        return self._flag.is_set()

    def check(self) -> None:
        """Raise Cancelled if set."""
        if self._flag.is_set():
            raise Cancelled

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True if the full time passed, False once cancelled."""
        return not self._flag.wait(seconds)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until set (True) or `timeout_s` has passed (False)."""
        return self._flag.wait(timeout_s)

    def link(self, ev: threading.Event) -> None:
        """Set `ev` too when this is set (at once if it already is)."""
        with self._lock:
            self._linked.add(ev)
            if self._flag.is_set():
                ev.set()

    def unlink(self, ev: threading.Event) -> None:
        with self._lock:
            self._linked.discard(ev)


def spawn(fn: Callable[[], Any], name: str,
          on_error: Callable[[BaseException], None] | None = None) -> threading.Thread:
    """Run `fn` in a new daemon thread; an exception goes to `on_error`."""
    def work() -> None:
        try:
            fn()
        except BaseException as exc:  # reported, never lost
            if on_error is not None:
                on_error(exc)

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    return thread


def call(fn: Callable[[], T], cancel: Cancel | None, name: str = "scrun-call") -> T:
    """`fn()` in a daemon thread, waited for until it returns (its result or exception)
    or `cancel` is set (Cancelled; `fn` goes on running, abandoned)."""
    done = threading.Event()
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the waiting thread
            outcome.append((False, exc))
        done.set()

    if cancel is not None:
        cancel.link(done)
    try:
        threading.Thread(target=work, name=name, daemon=True).start()
        done.wait()
    finally:
        if cancel is not None:
            cancel.unlink(done)
    if not outcome:
        raise Cancelled
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result
