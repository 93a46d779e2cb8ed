"""The anchor's control socket: one request per connection, peer uid checked.

One thread accepts; each connection gets a thread of its own, since a `start` or
`delete` request waits for the lifecycle while `state` must still answer.  Sockets are
the C module's (`_socket`): socket.py's wrapper, about 1 ms of the anchor's imports
before salloc runs, adds nothing the server uses.
"""

from __future__ import annotations

import _socket
import contextlib
import os
import threading
import time

from scrun_py.anchor.lifecycle import Lifecycle
from scrun_py.base.errors import PermissionDenied, ProtocolError, ScrunError
from scrun_py.base.logs import Logger
from scrun_py.container import protocol
from scrun_py.container.handle import NOT_OWNER, peer_uid

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

REQUEST_TIMEOUT_S = 30.0  # for the request line to arrive
#: the largest signal number a `kill` request may carry (SIGRTMAX on Linux)
MAX_SIGNAL = 64


class ControlServer:
    def __init__(self, lc: Lifecycle, listener: _socket.socket, log: Logger) -> None:
        self.lc = lc
        self.listener = listener
        self.log = log
        self._lock = threading.Lock()
        self._inflight: set[threading.Thread] = set()
        self._closed = False

    def start(self) -> None:
        threading.Thread(target=self._serve, name="scrun-control", daemon=True).start()

    def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting; let requests in flight (a `kill` whose signal step is still
        running when the container exits) send their reply before the anchor exits."""
        with self._lock:
            self._closed = True
            pending = self._inflight - {threading.current_thread()}
        with contextlib.suppress(OSError):
            self.listener.shutdown(_socket.SHUT_RDWR)  # wakes the accepting thread
        with contextlib.suppress(OSError):
            self.listener.close()
        deadline = time.monotonic() + grace_s
        for thread in pending:
            thread.join(max(deadline - time.monotonic(), 0.0))

    def _serve(self) -> None:
        while True:
            try:
                # accept4 with SOCK_CLOEXEC (typeshed does not list the C method)
                fd, _ = self.listener._accept()  # type: ignore[attr-defined]
            except OSError:
                return  # closed
            conn = _socket.socket(fileno=fd)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                thread = threading.Thread(target=self._handle, args=(conn,),
                                          name="scrun-request", daemon=True)
                self._inflight.add(thread)
            thread.start()

    def _handle(self, conn: _socket.socket) -> None:
        try:
            try:
                self._handle_one(conn)
            finally:
                conn.close()
        finally:
            with self._lock:
                self._inflight.discard(threading.current_thread())

    def _handle_one(self, conn: _socket.socket) -> None:
        try:
            # read the request before refusing: replying and closing first would make the
            # client's send fail (EPIPE) and hide the refusal behind "lost connection"
            conn.settimeout(REQUEST_TIMEOUT_S)
            line = protocol.read_line(conn)
            conn.settimeout(None)
            if peer_uid(conn) != os.getuid():
                raise PermissionDenied(NOT_OWNER)
            req = protocol.decode_request(line)
            reply = protocol.encode_ok(**self._dispatch(req))
        except (ScrunError, ValueError) as exc:
            reply = protocol.encode_error(exc if isinstance(exc, ScrunError)
                                          else ProtocolError(str(exc)))
        except OSError:  # the client went away, or sent nothing in time
            return
        except Exception as exc:  # never let one bad request take the anchor down
            self.log.exception("control request failed")
            reply = protocol.encode_error(ScrunError(f"internal error: {exc}"))
        with contextlib.suppress(OSError):
            conn.sendall(reply)

    def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        kind = req["type"]
        if kind == "start":
            return {"job_id": self.lc.start()}
        if kind == "kill":
            sig = req.get("signal")
            # type(), not isinstance: JSON `true` is an int to isinstance (SIGHUP)
            if type(sig) is not int or not 0 <= sig <= MAX_SIGNAL:
                raise ProtocolError("invalid signal")
            self.lc.kill(sig)
            return {}
        if kind == "delete":
            force = req.get("force", False)
            if type(force) is not bool:
                raise ProtocolError("invalid force")
            self.lc.delete(force)
            return {}
        raise ProtocolError(f"unknown request type {kind!r}")
