"""The anchor's control socket: one request per connection, peer uid checked.

One thread accepts; each connection gets a thread of its own, since a `start` or
`delete` request waits for the lifecycle while `state` must still answer.  Sockets are
the C module's (`_socket`): socket.py's wrapper (its cost: base/lean.py) adds nothing
the server uses.

A flood of connections (a runaway script of the caller's) must not silence the anchor.
At most MAX_HANDLERS connections are served at once, and each has REQUEST_TIMEOUT_S for
its whole request line.  A connection that still waits for its line when all the slots
are taken is the first to go: the newest connection takes the slot of the oldest such
one, which is answered BUSY and closed (a client of ours sends its line as soon as it
has connected, and what it sent is read before the close).  When every slot serves a
request, a new connection waits SLOT_WAIT_S for one, then is answered BUSY.  The listen
backlog is deep (BACKLOG): a client's connect to a full one fails at once, so the
connections of a burst that are not accepted yet must not fill it.  A failing `accept`
(out of descriptors or memory, an aborted connection, a signal) is waited out and
retried, out of descriptors after closing the older half of the connections still
waiting for their line: only `close` ends the accepting thread.
"""

from __future__ import annotations

import _socket
import contextlib
import errno
import itertools
import os
import threading
import time

from scrun_py.anchor.lifecycle import Lifecycle
from scrun_py.base.callerpath import peer_uid
from scrun_py.base.errors import (
    AnchorError,
    AnchorUnreachable,
    PermissionDenied,
    ProtocolError,
    ScrunError,
)
from scrun_py.base.logs import Logger
from scrun_py.container import protocol
from scrun_py.container.rootdir import NOT_OWNER

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

REQUEST_TIMEOUT_S = 5.0  # for the whole request line to arrive
#: the connections served at once (each one a thread)
MAX_HANDLERS = 64
#: the connections the kernel queues until the anchor accepts them: more than a burst
#: of them fills before it has taken them (a full queue fails a client's connect at once)
BACKLOG = 4096
#: how long a new connection waits for a slot when every slot serves a request
SLOT_WAIT_S = 0.5
#: the pause before `accept` is tried again after it failed: after closing a connection
#: (its descriptor is free at once), else the first of a doubling series up to the last
ACCEPT_RETRY_S = (0.001, 0.01, 0.5)
#: how often, at most, the same trouble is logged
WARN_EVERY_S = 10.0
#: errors that mean no descriptor or no memory for the accepted connection
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
BUSY = "container anchor is busy: too many connections at once; try again"
EXITING = "container anchor is exiting"
EVICTING = "control socket: too many connections at once; closing the oldest idle ones"
#: the largest signal number a `kill` request may carry (SIGRTMAX on Linux)
MAX_SIGNAL = 64


class _Deadline:
    """`recv` on a connection with the time left until one deadline: a timeout per call
    would let a client that sends a byte now and then keep its connection for ever."""

    def __init__(self, conn: _socket.socket, timeout_s: float) -> None:
        self.conn = conn
        self.end = time.monotonic() + timeout_s

    def recv(self, bufsize: int, /) -> bytes:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("no request line in time")
        self.conn.settimeout(left)
        return self.conn.recv(bufsize)


class ControlServer:
    def __init__(self, lc: Lifecycle, listener: _socket.socket, log: Logger) -> None:
        self.lc = lc
        self.listener = listener
        self.log = log
        self._lock = threading.Lock()
        self._inflight: set[threading.Thread] = set()
        self._closed = False
        self._slots = threading.BoundedSemaphore(MAX_HANDLERS)
        #: the connections still waiting for their request line, oldest first
        self._readers: dict[_socket.socket, None] = {}
        self._evicted: set[_socket.socket] = set()
        self._warned: dict[str, float] = {}
        self.thread: threading.Thread | None = None  # the accepting thread

    def start(self) -> None:
        with contextlib.suppress(OSError):  # (the kernel caps it at net.core.somaxconn)
            self.listener.listen(BACKLOG)
        self.thread = threading.Thread(target=self._serve, name="scrun-control", daemon=True)
        self.thread.start()

    def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting; let requests in flight (a `kill` whose signal step is still
        running when the container exits) send their reply before the anchor exits."""
        with self._lock:
            self._closed = True
            pending = self._inflight - {threading.current_thread()}
        while self._evict_oldest():  # a connection still waiting for its line: answered now
            pass
        with contextlib.suppress(OSError):
            self.listener.shutdown(_socket.SHUT_RDWR)  # wakes the accepting thread
        with contextlib.suppress(OSError):
            self.listener.close()
        deadline = time.monotonic() + grace_s
        for thread in pending:
            thread.join(max(deadline - time.monotonic(), 0.0))

    # ---- accepting ---------------------------------------------------------------------------
    def _serve(self) -> None:
        failures = 0
        while True:
            try:
                # accept4 with SOCK_CLOEXEC (typeshed does not list the C method)
                fd, _ = self.listener._accept()  # type: ignore[attr-defined]
            except OSError as exc:
                with self._lock:
                    if self._closed:
                        return
                self._accept_failed(exc, failures)
                failures += 1
                continue
            failures = 0
            if not self._admit(fd):
                return

    def _accept_failed(self, exc: OSError, failures: int) -> None:
        """Wait out a failed `accept` (never the end of the server: only close is);
        out of descriptors or memory, close the older half of the connections still
        waiting for their request line first (one at a time would cost a failed accept
        and a pause for every connection of a flood)."""
        self._warn("control socket: accept failed; retrying",
                   error=exc.strerror or str(exc), errno=exc.errno)
        first, step, longest = ACCEPT_RETRY_S
        if exc.errno in OUT_OF_RESOURCES and self._evict_oldest(half=True):
            time.sleep(first)
        else:
            time.sleep(min(step * 2 ** min(failures, 10), longest))

    def _admit(self, fd: int) -> bool:
        """Hand the accepted connection `fd` to a thread of its own (or answer BUSY);
        False once the server is closed."""
        try:
            conn = _socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return True
        if not self._take_slot():
            self._refuse(conn)
            return True
        thread = threading.Thread(target=self._handle, args=(conn,), name="scrun-request",
                                  daemon=True)
        with self._lock:
            if self._closed:
                self._slots.release()
                conn.close()
                return False
            self._inflight.add(thread)
            self._readers[conn] = None
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (memory, the process's limit)
            with self._lock:
                self._inflight.discard(thread)
                self._readers.pop(conn, None)
            self._slots.release()
            self._refuse(conn)
        return True

    def _take_slot(self) -> bool:
        """A slot for a new connection: a free one, else the one of the oldest connection
        still waiting for its request line, else the first freed within SLOT_WAIT_S."""
        if self._slots.acquire(blocking=False):
            return True
        deadline = time.monotonic() + SLOT_WAIT_S
        while True:
            if self._evict_oldest():
                self._warn(EVICTING, limit=MAX_HANDLERS)
            if self._slots.acquire(timeout=0.02):
                return True
            if time.monotonic() >= deadline:
                self._warn("control socket: every connection is serving a request; "
                           "refusing more", limit=MAX_HANDLERS)
                return False

    def _evict_oldest(self, half: bool = False) -> bool:
        """End the wait of the oldest connection still waiting for its request line (of
        the older half of them with `half`); what each sent before is still read, then
        its thread answers BUSY and closes it.  False when there was none."""
        with self._lock:
            oldest = list(itertools.islice(self._readers, max(len(self._readers) // 2, 1)
                                           if half else 1))
            for conn in oldest:
                del self._readers[conn]
                self._evicted.add(conn)
                with contextlib.suppress(OSError):
                    conn.shutdown(_socket.SHUT_RD)  # its recv returns what is left, then EOF
        return bool(oldest)

    def _refuse(self, conn: _socket.socket) -> None:
        """Answer BUSY without waiting (the accepting thread never blocks on a client);
        what the client already sent is read first, so that closing does not reset the
        connection under the reply."""
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.recv(protocol.MAX_MESSAGE + 1)
        with contextlib.suppress(OSError):
            conn.send(protocol.encode_error(AnchorError(BUSY)))
        conn.close()

    def _warn(self, msg: str, **fields: Any) -> None:
        """Log `msg` once every WARN_EVERY_S at most (a flood must not flood the log)."""
        now = time.monotonic()
        with self._lock:
            if now - self._warned.get(msg, -WARN_EVERY_S) < WARN_EVERY_S:
                return
            self._warned[msg] = now
        self.log.warning(msg, **fields)

    # ---- serving -----------------------------------------------------------------------------
    def _handle(self, conn: _socket.socket) -> None:
        try:
            self._handle_one(conn)
        finally:
            with self._lock:
                self._readers.pop(conn, None)
                self._evicted.discard(conn)
                self._inflight.discard(threading.current_thread())
            conn.close()
            self._slots.release()

    def _read_request(self, conn: _socket.socket) -> bytes:
        """The request line, within REQUEST_TIMEOUT_S; AnchorError(BUSY) when the
        connection was evicted before its whole line came (AnchorUnreachable once the
        server is closed)."""
        try:
            line = protocol.read_line(_Deadline(conn, REQUEST_TIMEOUT_S))
        finally:
            with self._lock:
                self._readers.pop(conn, None)
                evicted = conn in self._evicted
                self._evicted.discard(conn)
        if evicted and not line.endswith(b"\n"):
            with self._lock:
                closed = self._closed
            raise AnchorUnreachable(EXITING) if closed else AnchorError(BUSY)
        return line

    def _handle_one(self, conn: _socket.socket) -> None:
        try:
            # read the request before refusing: replying and closing first would make the
            # client's send fail (EPIPE) and hide the refusal behind "lost connection"
            line = self._read_request(conn)
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
