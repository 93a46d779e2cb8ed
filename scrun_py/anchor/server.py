"""The anchor's control socket: one request per connection, peer uid checked."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from typing import Any

import structlog

from scrun_py import protocol
from scrun_py.anchor.lifecycle import Lifecycle
from scrun_py.errors import PermissionDenied, ProtocolError, ScrunError


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    def __init__(self, lc: Lifecycle, listener: socket.socket) -> None:
        self.lc = lc
        self.listener = listener
        self.log = structlog.get_logger()
        self.server: asyncio.AbstractServer | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._handle, sock=self.listener,
                                                      limit=protocol.MAX_MESSAGE)

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting; let requests in flight (a `kill` whose signal step is still
        running when the container exits) send their reply before the anchor exits."""
        if self.server is not None:
            self.server.close()
        pending = self._inflight - {asyncio.current_task()}
        if pending:
            await asyncio.wait(pending, timeout=grace_s)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            await self._handle_one(reader, writer)
        finally:
            if task is not None:
                self._inflight.discard(task)

    async def _handle_one(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        try:
            # read the request before refusing: replying and closing first would make the
            # client's send fail (EPIPE) and hide the refusal behind "lost connection"
            line = await asyncio.wait_for(reader.readline(), 30)
            sock = writer.get_extra_info("socket")
            if peer_uid(sock) != os.getuid():
                raise PermissionDenied("permission denied: container belongs to another user")
            req = protocol.decode_request(line)
            reply = protocol.encode_ok(**await self._dispatch(req))
        except (ScrunError, ValueError) as exc:
            reply = protocol.encode_error(exc if isinstance(exc, ScrunError)
                                          else ProtocolError(str(exc)))
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        except Exception as exc:  # never let one bad request take the anchor down
            self.log.exception("control request failed")
            reply = protocol.encode_error(ScrunError(f"internal error: {exc}"))
        try:
            writer.write(reply)
            await writer.drain()
            writer.close()
        except ConnectionError:
            pass

    async def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        kind = req["type"]
        if kind == "state":
            return self.lc.snapshot()
        if kind == "start":
            return {"job_id": await self.lc.start()}
        if kind == "kill":
            sig = req.get("signal")
            if not isinstance(sig, int) or not 0 <= sig < 65:
                raise ProtocolError("invalid signal")
            await self.lc.kill(sig)
            return {}
        if kind == "delete":
            await self.lc.delete(bool(req.get("force")))
            return {}
        raise ProtocolError(f"unknown request type {kind!r}")
