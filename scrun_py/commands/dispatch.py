"""The lifecycle verbs by name, as both command-line parsers call them (cli/fast_path.py
and cli/click_app.py): each verb's module is imported only when it runs."""

from __future__ import annotations

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from scrun_py.anchor.launch import EarlyAnchor
    from scrun_py.base.invocation import Invocation


def run_verb(inv: Invocation, verb: str, args: list[str], options: dict[str, Any],
             early: EarlyAnchor | None = None) -> None:
    """Run `create`, `start`, `state`, `kill` or `delete`: `args` the positional
    arguments, `options` the verb's options by dest (those not given may be left out)."""
    if verb == "create":
        from scrun_py.commands import create

        create.run(inv, create.CreateArgs(args[0], options.get("bundle"),
                                          options.get("pid_file"),
                                          options.get("console_socket")), early)
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
