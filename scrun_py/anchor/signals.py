"""Signals to the anchor: the handlers only queue an event; the lifecycle acts on it."""

from __future__ import annotations

from scrun_py.anchor.lifecycle import Lifecycle, Occurrence
from scrun_py.anchor.table import Event
from scrun_py.base import signames
from scrun_py.base.signames import SIGHUP, SIGINT, SIGPIPE, SIGTERM

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from types import FrameType

HANDLED = (SIGTERM, SIGINT, SIGHUP)


def install(lc: Lifecycle) -> None:
    """First signal: orderly stop (kill the container, stage_out, end the job), with the
    container's exit code if it ran, else 128+signal; a second one skips stage_out.
    Call from the main thread (Python runs handlers there)."""
    def handler(signum: int, _frame: FrameType | None) -> None:
        lc.post(Occurrence(Event.ANCHOR_SIGNAL, code=128 + signum, sig=signum,
                   reason=f"anchor signal {signum}"))

    for sig in HANDLED:
        signames.set_handler(sig, handler)
    # SIGPIPE: a closed engine pipe must not kill the anchor (Slurm logs and continues)
    signames.ignore(SIGPIPE)
