"""exec's supervisor without a terminal: a signal goes to the node's runtime that the
step's marker line named, through the target, and not to srun (whose slurmstepd would
signal every process of the step, the runtime too, which relays it a second time);
before the marker, to srun.  Here `srun` is a shell script and the target records."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.slurm import supervisor
from scrun_py.slurm.node_step import RUNTIME_MARKER


class RecordingTarget:
    """A NodeTarget's env() and signal_runtime(), recorded."""

    def __init__(self) -> None:
        self.signalled: list[tuple[tuple[int, int, str], int]] = []

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def signal_runtime(self, process: tuple[int, int, str], signum: int) -> None:
        self.signalled.append((process, signum))


@pytest.fixture(autouse=True)
def _handlers_back() -> Iterator[None]:
    """supervise sets the handlers of FORWARDED: pytest's come back after each test."""
    sigs = [signal.Signals[name] for name in supervisor.FORWARDED]
    before = {sig: signal.getsignal(sig) for sig in sigs}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def run(script: str, target: RecordingTarget, after_s: float) -> int:
    """supervise `sh -c script` with `target`; SIGUSR1 to ourselves `after_s` in."""
    timer = threading.Timer(after_s, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        return supervisor.supervise([procs.resolve_program("sh", os.environ), "-c", script],
                                    dict(os.environ), target=target)  # type: ignore[arg-type]
    finally:
        timer.cancel()


def test_after_the_marker_the_runtime_is_signalled_and_not_srun(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    target = RecordingTarget()
    marker = RUNTIME_MARKER.decode()
    rc = run(f"trap 'exit 7' USR1; echo '{marker}4242 77 n3' >&2; echo err >&2; "
             "n=0; while [ $n -lt 15 ]; do sleep 0.1; n=$((n+1)); done", target, 0.5)
    assert 0 == rc
    assert [((4242, 77, "n3"), signal.SIGUSR1)] == target.signalled
    assert "err\n" == capfd.readouterr().err


def test_before_the_marker_srun_is_signalled(tmp_path: Path) -> None:
    target = RecordingTarget()
    marker = RUNTIME_MARKER.decode()
    rc = run(f"trap 'exit 7' USR1; n=0; while [ $n -lt 30 ]; do sleep 0.1; n=$((n+1)); "
             f"done; echo '{marker}4242 77 n3' >&2", target, 0.5)
    assert 7 == rc
    assert [] == target.signalled


def test_without_a_target_srun_is_signalled() -> None:
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        rc = supervisor.supervise(
            [procs.resolve_program("sh", os.environ), "-c",
             "trap 'exit 7' USR1; n=0; while [ $n -lt 30 ]; do sleep 0.1; n=$((n+1)); done"],
            dict(os.environ))
    finally:
        timer.cancel()
    assert 7 == rc
