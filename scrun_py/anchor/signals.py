"""Signals to the anchor: handlers only enqueue; one consumer acts (uvicorn style)."""

from __future__ import annotations

import asyncio
import signal

import structlog

from scrun_py.anchor.supervisor import Supervisor

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def install(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[int]) -> None:
    for sig in HANDLED:
        loop.add_signal_handler(sig, queue.put_nowait, int(sig))
    # SIGPIPE: a closed engine pipe must not kill the anchor (Slurm logs and continues)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


async def consume(queue: asyncio.Queue[int], sup: Supervisor) -> None:
    log = structlog.get_logger()
    count = 0
    while True:
        sig = await queue.get()
        count += 1
        log.info("anchor received signal", signal=sig, container_id=sup.record.id)
        # first signal: orderly teardown (kill container, stage_out, end job);
        # the exit code is the container's if it ran, else 128+signal.
        sup.request_stop(128 + sig, f"anchor signal {sig}")
        if count > 1:
            sup.staged_in = False  # second signal: skip stage_out, just end the job
