"""`run`: create + start + wait, exit with the container's exit code, then delete."""

from __future__ import annotations

from scrun_py.base.invocation import Invocation
from scrun_py.commands import create, delete, start
from scrun_py.commands.create import CreateArgs


def run(inv: Invocation, args: CreateArgs, detach: bool, keep: bool) -> int:
    container_id = args.container_id
    anchor = create.run(inv, args)
    try:
        start.run(inv, container_id)
    except BaseException:
        delete.run(inv, container_id, force=True)
        raise
    if detach:
        return 0
    rc = anchor.wait()
    if not keep:
        delete.run(inv, container_id, force=True)
    return rc
