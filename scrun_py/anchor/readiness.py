"""The one-JSON-line readiness pipe between `create` and its anchor (conmon's sync pipe)."""

from __future__ import annotations

import os
import select

from scrun_py.container import fastjson

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any


def write_ready(fd: int, pid: int) -> None:
    _write(fd, {"ok": True, "pid": pid})


def write_failed(fd: int, kind: str, message: str) -> None:
    _write(fd, {"ok": False, "kind": kind, "message": message})


def _write(fd: int, obj: dict[str, Any]) -> None:
    try:
        os.write(fd, fastjson.dumps(obj).encode() + b"\n")
    except OSError:
        pass  # create went away: nothing to tell


def read_result(fd: int, timeout_s: float | None) -> dict[str, Any] | None:
    """The anchor's report, or None if it exited (EOF) without one."""
    buf = b""
    while not buf.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            raise TimeoutError
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    if not buf.strip():
        return None
    try:
        obj = fastjson.loads(buf)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
