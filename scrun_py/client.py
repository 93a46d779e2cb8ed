"""CLI side of the control socket: one request, one reply."""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Any

from scrun_py import protocol, spool
from scrun_py.errors import AnchorUnreachable, PermissionDenied, ProtocolError


def request(root: Path, container_id: str, kind: str, timeout_s: float | None = 30.0,
            **fields: Any) -> dict[str, Any]:
    path = spool.container_dir(root, container_id)
    try:
        sock = spool.connect(path, timeout_s=5.0)
    except PermissionError as exc:
        raise PermissionDenied("permission denied: container belongs to another user") from exc
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise PermissionDenied("permission denied: container belongs to another user") from exc
        raise AnchorUnreachable("container anchor is not running") from exc
    with sock:
        sock.settimeout(timeout_s)
        try:
            sock.sendall(protocol.encode_request(kind, **fields))
            data = _read_line(sock)
        except TimeoutError as exc:
            raise AnchorUnreachable("timed out waiting for the container anchor") from exc
        except OSError as exc:
            raise AnchorUnreachable("lost connection to the container anchor") from exc
    if not data:
        raise AnchorUnreachable("container anchor closed the connection")
    return protocol.reply_or_raise(protocol.decode(data))


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            break
        if size > protocol.MAX_MESSAGE:
            raise ProtocolError("reply too large")
    return b"".join(chunks)
