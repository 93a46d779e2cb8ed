"""Unit tests for scrun_py.base.signames.parse_signal: the SIGNAL argument of `kill`."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import signal

import pytest

from scrun_py.base.errors import ScrunError
from scrun_py.base.signames import SIGRTMAX, parse_signal

RTMIN = int(signal.SIGRTMIN)


class TestNumbers:
    @pytest.mark.parametrize(("value", "expected"), [
        ("1", 1), ("9", 9), ("15", 15), ("09", 9), (" 15 ", 15), (str(SIGRTMAX), SIGRTMAX),
    ])
    def test_number(self, value: str, expected: int) -> None:
        """A decimal number from 1 to SIGRTMAX is taken as is."""
        assert expected == parse_signal(value)

    @pytest.mark.parametrize("value", ["0", str(SIGRTMAX + 1), "1000", "99999999999999999999"])
    def test_out_of_range(self, value: str) -> None:
        """0 and numbers above SIGRTMAX are invalid, and the message repeats the value."""
        with pytest.raises(ScrunError, match=f"^invalid signal: {value}$"):
            parse_signal(value)

    @pytest.mark.parametrize("value", ["-1", "+9", "1.5", "0x9"])
    def test_not_a_plain_number(self, value: str) -> None:
        """Signs, decimals and hex are not numbers; as names they are unknown."""
        with pytest.raises(ScrunError, match="unknown signal"):
            parse_signal(value)

    @pytest.mark.parametrize("value", ["\u00b2", "\u0661\u0665"])
    def test_non_ascii_digits(self, value: str) -> None:
        """Unicode digits ('²', Arabic-Indic 15) are rejected cleanly, not parsed or crashed on."""
        with pytest.raises(ScrunError, match="unknown signal"):
            parse_signal(value)


class TestNames:
    @pytest.mark.parametrize(("value", "expected"), [
        ("TERM", signal.SIGTERM), ("SIGTERM", signal.SIGTERM), ("term", signal.SIGTERM),
        ("sigterm", signal.SIGTERM), ("SigKill", signal.SIGKILL), ("hup", signal.SIGHUP),
        ("USR1", signal.SIGUSR1), ("winch", signal.SIGWINCH), ("IOT", signal.SIGABRT),
        (" int ", signal.SIGINT),
    ])
    def test_name(self, value: str, expected: signal.Signals) -> None:
        """A name with or without SIG, in any case, gives its number."""
        assert int(expected) == parse_signal(value)

    @pytest.mark.parametrize(("value", "expected"), [
        ("RTMIN", RTMIN), ("SIGRTMIN", RTMIN), ("rtmin+0", RTMIN), ("RTMIN+1", RTMIN + 1),
        ("sigrtmin+3", RTMIN + 3), ("RTMAX", SIGRTMAX), ("RTMAX-0", SIGRTMAX),
        ("SIGRTMAX-2", SIGRTMAX - 2), (f"RTMIN+{SIGRTMAX - RTMIN}", SIGRTMAX),
        (f"RTMAX-{SIGRTMAX - RTMIN}", RTMIN),
    ])
    def test_realtime(self, value: str, expected: int) -> None:
        """RTMIN+n and RTMAX-n count from the real-time signal bounds."""
        assert expected == parse_signal(value)

    @pytest.mark.parametrize("value", [
        f"RTMIN+{SIGRTMAX - RTMIN + 1}", f"RTMAX-{SIGRTMAX - RTMIN + 1}", "RTMIN+", "RTMIN+x",
        "RTMIN+-1", "RTMIN+\u00b2",
    ])
    def test_realtime_out_of_range(self, value: str) -> None:
        """An offset outside the real-time range, or not a number, is an invalid signal."""
        with pytest.raises(ScrunError, match=f"^invalid signal: {value.replace('+', '[+]')}$"):
            parse_signal(value)

    @pytest.mark.parametrize("value", ["BOGUS", "SIGBOGUS", "SIG", "KILLL", "TERM9"])
    def test_unknown_name(self, value: str) -> None:
        """An unknown name is reported as `unknown signal` with the value as given."""
        with pytest.raises(ScrunError) as info:
            parse_signal(value)
        assert f"unknown signal {value!r}" == str(info.value)

    @pytest.mark.parametrize("value", ["", "   "])
    def test_empty(self, value: str) -> None:
        """An empty signal argument is invalid."""
        with pytest.raises(ScrunError, match=r"^invalid signal: empty$"):
            parse_signal(value)


class TestRelay:
    """signames.Relay, the one relay of signals to a child (create's, exec's)."""

    class Child:
        def __init__(self, gone: bool = False) -> None:
            self.returncode: int | None = None
            self.sent: list[int] = []
            self.gone = gone

        def send_signal(self, signum: int) -> None:
            if self.gone:
                raise ProcessLookupError
            self.sent.append(signum)

    def test_forwards_while_the_child_runs(self) -> None:
        from scrun_py.base.signames import Relay

        before = signal.getsignal(signal.SIGUSR1)
        try:
            relay = Relay([signal.SIGUSR1])
            signal.raise_signal(signal.SIGUSR1)  # no child yet: dropped
            child = relay.child = self.Child()
            signal.raise_signal(signal.SIGUSR1)
            child.returncode = 0
            signal.raise_signal(signal.SIGUSR1)  # reaped: dropped
            assert [signal.SIGUSR1] == child.sent
            relay.child = self.Child(gone=True)
            signal.raise_signal(signal.SIGUSR1)  # exited, not reaped: no error
        finally:
            signal.signal(signal.SIGUSR1, before)
