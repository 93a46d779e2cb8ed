"""Signals to the anchor: the handlers only queue an event; the lifecycle acts on it."""

from __future__ import annotations

import asyncio
import signal

from scrun_py.anchor.lifecycle import Ev, Lifecycle
from scrun_py.anchor.table import Event

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def install(loop: asyncio.AbstractEventLoop, lc: Lifecycle) -> None:
    """First signal: orderly stop (kill the container, stage_out, end the job), with the
    container's exit code if it ran, else 128+signal; a second one skips stage_out."""
    for sig in HANDLED:
        loop.add_signal_handler(sig, lc.post, Ev(Event.ANCHOR_SIGNAL, code=128 + sig,
                                                 sig=int(sig), reason=f"anchor signal {int(sig)}"))
    # SIGPIPE: a closed engine pipe must not kill the anchor (Slurm logs and continues)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
