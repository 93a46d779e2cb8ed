"""`run`: create + start + wait, exit with the container's exit code, then delete."""

from __future__ import annotations

from scrun_py.base.invocation import Invocation
from scrun_py.commands import create, delete, start


def run(inv: Invocation, container_id: str, bundle: str | None, pid_file: str | None,
        console_socket: str | None, detach: bool, keep: bool) -> int:
    anchor = create.run(inv, container_id, bundle, pid_file, console_socket)
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
