"""exec's supervisor: it runs the helper step's srun (node_step.py builds its argv),
passes its stdio on (the caller's, or a pty), relays signals, and returns the exec'd
process's exit status.

Without a terminal, a signal goes to the node's runtime alone (RuntimeSignals), which
passes it to the exec'd process once, as `runc exec` does: srun would have slurmstepd
signal every process of the step.  With a terminal it goes to srun.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from scrun_py.base import procs, signames
from scrun_py.base.errors import ScrunError
from scrun_py.slurm import runner
from scrun_py.slurm.node_step import RUNTIME_MARKER

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from scrun_py.slurm.node_step import NodeTarget
    from scrun_py.slurm.stderr_relay import StderrRelay

#: the signals exec's supervisor relays
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")


class RuntimeSignals:
    """exec's signals without a terminal.  srun would have slurmstepd send a signal to
    every process of the step: the exec'd process, its children, and the node's runtime,
    which relays it to the exec'd process a second time (crun and runc do), so a trap
    could run twice.  Here each signal goes to the node's runtime alone (`deliver`: the
    runtime named by the step's RUNTIME_MARKER line, and the signal), which passes it to
    the exec'd process once, as `runc exec` does; before that line has come (the node
    script still waits for the container), to srun.  The handlers only enqueue; a
    thread delivers, in order."""

    def __init__(self, signals: Sequence[int], named: Callable[[], tuple[int, int, str] | None],
                 deliver: Callable[[tuple[int, int, str], int], None]) -> None:
        import queue
        import threading

        self.child: Any = None  # srun, once started
        self._named, self._deliver = named, deliver
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._done = False
        for sig in signals:
            signames.set_handler(sig, self._enqueue)
        self._thread = threading.Thread(target=self._run, name="scrun-exec-signals",
                                        daemon=True)
        self._thread.start()

    def _enqueue(self, signum: int, _frame: object) -> None:
        self._queue.put(signum)

    def _run(self) -> None:
        while (signum := self._queue.get()) is not None:
            process, child = self._named(), self.child
            if self._done or child is None or child.returncode is not None:
                continue
            if process is not None:
                self._deliver(process, signum)
                continue
            try:
                child.send_signal(signum)
            except ProcessLookupError:  # exited, not yet reaped
                pass

    def stop(self, wait_s: float = 5.0) -> None:
        """srun has ended: signals still queued are dropped."""
        self._done = True
        self._queue.put(None)
        self._thread.join(wait_s)


def _signal_relay(errors: StderrRelay | None,
                  target: NodeTarget | None) -> signames.Relay | RuntimeSignals:
    """RuntimeSignals where stderr passes through `errors` (no terminal) and signals can go
    to the runtime on `target`'s node; else the relay to srun."""
    signals = [signames.number(name) for name in FORWARDED]
    if errors is None or target is None:
        return signames.Relay(signals)
    relay = errors  # bound for the closure
    return RuntimeSignals(signals, lambda: relay.runtime_process, target.signal_runtime)


def supervise(argv: list[str], env: dict[str, str], *, slave: int | None = None,
              status_of: Callable[[int, bytes], int] | None = None,
              target: NodeTarget | None = None) -> int:
    """Run exec's srun, relaying FORWARDED signals; its exit status (128+N when a signal N
    ended it), through `status_of` (status, the end of its stderr) when given.  With
    `slave` (a pty), srun's stdio is the pty, and signals go to srun; else stdin and
    stdout are ours, stderr goes through the relay that drops srun's exit report, and
    with `target` signals go to the node's runtime (RuntimeSignals)."""
    import subprocess

    from scrun_py.slurm.stderr_relay import StderrRelay

    errors = (StderrRelay(2, RUNTIME_MARKER if target is not None else None)
              if slave is None else None)
    relay = _signal_relay(errors, target)
    program = procs.resolve_program(argv[0], env)  # absolute already: never the cwd's
    cwd = runner.start_dir()  # slurmstepd enters it on the node
    try:
        if slave is not None:
            proc = subprocess.Popen(argv, executable=program, env=env, stdin=slave,
                                    stdout=slave, stderr=slave, start_new_session=True,
                                    cwd=cwd)
            os.close(slave)
        else:
            assert errors is not None
            proc = subprocess.Popen(argv, executable=program, env=env,
                                    stderr=errors.write_fd, cwd=cwd)
            errors.start()
        relay.child = proc
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:
                continue
        if errors is not None:
            errors.drain()
    except OSError as exc:
        raise ScrunError(f"exec: cannot run {argv[0]}: {exc.strerror}") from None
    finally:
        if isinstance(relay, RuntimeSignals):
            relay.stop()
        if errors is not None:
            errors.close()
    status = procs.exit_code(code)
    return status if status_of is None else status_of(
        status, errors.tail if errors is not None else b"")
