"""One module per OCI verb, each exposing `run(inv, ...)`: the one implementation of
that verb, whether click parsed the command line or not (entry.py).

Imported by every verb: nothing here imports more than os.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from scrun_py.anchor.launch import EarlyAnchor
    from scrun_py.base.invocation import Invocation


def audit(inv: Invocation, event: str, *, container_id: str, **fields: Any) -> None:
    """The site's audit record of `event` (scrun-py.toml [audit]); without a site file
    in either place it looks (handle.site_file_may_apply) there is nothing to do."""
    from scrun_py.container.handle import site_file_may_apply

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


def run_verb(inv: Invocation, verb: str, args: list[str], options: dict[str, Any],
             early: EarlyAnchor | None = None) -> None:
    """Run `create`, `start`, `state`, `kill` or `delete`: `args` the positional
    arguments, `options` the verb's options by dest (those not given may be left out)."""
    if verb == "create":
        from scrun_py.commands import create

        create.run(inv, args[0], options.get("bundle"), options.get("pid_file"),
                   options.get("console_socket"), early)
    elif verb == "state":
        from scrun_py.commands import state

        state.run(inv, args[0])
    elif verb == "start":
        from scrun_py.commands import start

        start.run(inv, args[0])
    elif verb == "kill":
        from scrun_py.commands import kill

        signal = args[1] if len(args) > 1 else None
        if options.get("regex"):
            kill.run_matching(inv, args[0], signal)
        else:
            kill.run(inv, args[0], signal)
    elif verb == "delete":
        from scrun_py.commands import delete

        if options.get("regex"):
            delete.run_matching(inv, args[0], bool(options.get("force")))
        else:
            delete.run(inv, args[0], bool(options.get("force")))
    else:
        raise ValueError(f"run_verb: {verb} is not run here")
