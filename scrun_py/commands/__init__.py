"""One module per OCI verb, each exposing `run(inv, ...)`: the one implementation of
that verb, whether click parsed the command line or not (entry.py; dispatch.py runs the
lifecycle verbs by name).

Here: the audit record every verb writes.  Imported by every verb: nothing here imports
more than os, and nothing here imports a verb.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from scrun_py.base.invocation import Invocation


def audit(inv: Invocation, event: str, *, container_id: str, **fields: Any) -> None:
    """The site's audit record of `event` (scrun-py.toml [audit]); without a site file
    in either place it looks (presence.site_file_may_apply) there is nothing to do."""
    from scrun_py.site.presence import site_file_may_apply

    if not site_file_may_apply(inv.slurm_conf_file()):
        return
    from scrun_py.site import audit as trail

    trail.emit(inv.slurm_conf_file(), event, container_id=container_id, **fields)


def audited(inv: Invocation, event: str, act: Callable[[], None], *, container_id: str,
            **fields: Any) -> None:
    """`act()` with its audit record written first: the anchor may see the container
    exit (and write `exit`) before `act` returns, and the trail keeps the order of what
    happened.  An `act` that fails adds `<event>-failed` with the error."""
    audit(inv, event, container_id=container_id, **fields)
    try:
        act()
    except Exception as exc:
        audit(inv, f"{event}-failed", container_id=container_id, error=str(exc), **fields)
        raise
