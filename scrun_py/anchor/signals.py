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


def relay_to_container(lc: Lifecycle, sig: int) -> None:
    """A signal sent straight to the container's pid (the namespace holder relays it):
    delivered as `kill ID SIG` would (a running container's process gets it; a created
    one stops with 128+SIG).  Call from any thread but a signal handler's."""
    from scrun_py.base.errors import ScrunError

    lc.container.event("signal to the container's pid", signal=sig)
    try:
        lc.kill(sig)
    except ScrunError:
        pass  # not running (any more): nothing to deliver it to


def pid_killed(lc: Lifecycle) -> None:
    """The container's pid died without being told to (SIGKILL, which its init cannot
    refuse): the engine has seen its container end, so it is stopped as if killed
    (SIGKILL to the container, stage_out, the job ended; exit code 137)."""
    from scrun_py.base.errors import ScrunError
    from scrun_py.base.signames import SIGKILL

    lc.container.event("the container's pid was killed")
    try:
        lc.fire(Occurrence(Event.ANCHOR_SIGNAL, code=128 + SIGKILL, sig=SIGKILL,
                           reason="the container's pid was killed"))
    except ScrunError:
        pass
