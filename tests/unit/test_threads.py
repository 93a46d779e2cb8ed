"""The anchor's threads: daemon threads, and waits a stop request cuts short."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import threading
import time

import pytest

from scrun_py.base import threads
from scrun_py.base.threads import Cancel, Cancelled


class TestCall:
    def test_result_and_exception(self) -> None:
        assert 3 == threads.call(lambda: 1 + 2, Cancel())

        def boom() -> None:
            raise ValueError("x")

        with pytest.raises(ValueError, match="x"):
            threads.call(boom, None)

    def test_cancel_abandons_a_hanging_call(self) -> None:
        """The caller is released at once; the call goes on in its daemon thread."""
        cancel, release = Cancel(), threading.Event()
        threading.Timer(0.1, cancel.set).start()
        started = time.monotonic()
        with pytest.raises(Cancelled):
            threads.call(lambda: release.wait(30), cancel)
        assert time.monotonic() - started < 10
        hung = [t for t in threading.enumerate() if t.name == "scrun-call"]
        assert hung
        assert all(t.daemon for t in hung)
        release.set()

    def test_already_cancelled(self) -> None:
        cancel = Cancel()
        cancel.set()
        with pytest.raises(Cancelled):
            threads.call(lambda: time.sleep(5), cancel)


class TestCancel:
    def test_sleep_is_cut_short(self) -> None:
        cancel = Cancel()
        assert cancel.sleep(0.01)
        threading.Timer(0.05, cancel.set).start()
        assert not cancel.sleep(30)
        assert cancel.is_set()
        with pytest.raises(Cancelled):
            cancel.check()

    def test_link_sets_the_event(self) -> None:
        cancel, ev = Cancel(), threading.Event()
        cancel.link(ev)
        cancel.set()
        assert ev.is_set()
        late = threading.Event()
        cancel.link(late)  # linked after: set at once
        assert late.is_set()


class TestSpawn:
    def test_error_is_reported(self) -> None:
        seen: list[BaseException] = []

        def boom() -> None:
            raise RuntimeError("lost?")

        thread = threads.spawn(boom, "scrun-test", seen.append)
        thread.join(5)
        assert thread.daemon
        assert ["lost?"] == [str(e) for e in seen]
