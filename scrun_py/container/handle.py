"""One container as the short-lived verbs see it: its directory under --root (opened and
checked by container/rootdir.py), its record (container/record.py), the liveness of its
anchor and one request on its control socket.

`state`, `start`, `kill` and `delete` go through this handle in every case.  `state` is
polled and engines call `start` and `delete` once per container: the interpreter's start
is most of their cost, so this module imports os, the C JSON scanner (fastjson) and, for
a request, socket; paths are strings.  The verbs' timeouts have their one home here.
"""

from __future__ import annotations

import os

from scrun_py.base.layout import SOCKET_NAME, STATE_FILE, STOPPED
from scrun_py.base.procs import process_start_time
from scrun_py.container import rootdir
from scrun_py.container.record import ContainerRecord, render, state_document, validate_id

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

#: how long `start` waits for the anchor to launch the step (image staging included),
#: `kill` for it to deliver the signal, and every verb to connect
START_TIMEOUT_S = 600.0
KILL_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 5.0


class Container:
    """The container `container_id` under the --root directory `root` (absolute).

    Nothing is taken from the root on trust: the root and the container's directory are
    opened without following a symlink and must be the caller's and private (open_root,
    dir_fd), state.json is read through that descriptor with O_NOFOLLOW and must be a
    regular file of the caller's, and the control socket's peer must be the caller's uid
    (connect).  Another local user can make the default root in /tmp first, or plant a
    record and a socket of their own: every verb then refuses with one line."""

    def __init__(self, root: str, container_id: str) -> None:
        self._fd = -1  # the container's directory, once dir_fd has opened and checked it
        self.id = validate_id(container_id)
        self.root = root
        self.dir = os.path.join(root, container_id)
        self.state_file = os.path.join(self.dir, STATE_FILE)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def dir_fd(self) -> int:
        """The container's directory, opened and checked (rootdir.open_container) once."""
        if self._fd < 0:
            self._fd = rootdir.open_container(self.root, self.id)
        return self._fd

    def exists(self) -> bool:
        """Whether the container's directory is there (and the caller's: dir_fd)."""
        from scrun_py.base.errors import ContainerNotFound

        try:
            self.dir_fd()
        except ContainerNotFound:
            return False
        return True

    def has_socket(self) -> bool:
        """Whether the anchor's socket is in the container's directory."""
        try:
            os.stat(SOCKET_NAME, dir_fd=self.dir_fd(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def foreign_content(self) -> str:
        """What makes the directory other than one scrun-py made (rootdir.foreign_content)."""
        return rootdir.foreign_content(self.dir_fd())

    def remove(self) -> None:
        """Remove the container's directory through the checked root, never following a
        symlink (remove_at)."""
        self.close()
        root_fd = rootdir.open_root(self.root)
        if root_fd is None:
            return
        try:
            rootdir.remove_at(root_fd, self.id)
        finally:
            os.close(root_fd)

    def record(self) -> ContainerRecord:
        """The record (rootdir.read_state); ContainerNotFound, or ScrunError for one that
        cannot be read or is not the caller's.  (The errors module is imported only on
        the way to an error: `state` of a good record does without it.)"""
        data = rootdir.read_state(self.dir_fd(), self.dir)
        try:
            return ContainerRecord.from_json(data)
        except (ValueError, TypeError, RecursionError) as exc:
            from scrun_py.base.errors import ScrunError

            raise ScrunError(f"corrupt container state file: {self.state_file}") from exc

    @staticmethod
    def anchor_alive(record: ContainerRecord) -> bool:
        """The anchor the record names runs (not a later process with its pid)."""
        if record.anchor_pid <= 0:
            return False
        started = process_start_time(record.anchor_pid)
        return bool(started) and (not record.anchor_start or started == record.anchor_start)

    @classmethod
    def status(cls, record: ContainerRecord) -> str:
        """The record's status, refreshed against its anchor: a dead anchor's container
        has stopped, whatever the record says (runc's refreshState)."""
        if record.status != STOPPED and not cls.anchor_alive(record):
            return STOPPED
        return record.status

    def state_line(self) -> str:
        """The OCI state document `state` prints, as one line of compact JSON."""
        record = self.record()
        return render(state_document(record, self.status(record)))

    def request(self, kind: str, timeout_s: float | None, **fields: Any) -> dict[str, Any]:
        """Send one control request to the anchor; its reply, or the error it raised.
        AnchorUnreachable when nothing answers; PermissionDenied for another user's."""
        from scrun_py.base.errors import AnchorUnreachable
        from scrun_py.container import protocol

        sock = self.connect()
        try:
            sock.settimeout(timeout_s)
            sock.sendall(protocol.encode_request(kind, **fields))
            data = protocol.read_line(sock)
        except TimeoutError as exc:
            raise AnchorUnreachable("timed out waiting for the container anchor") from exc
        except OSError as exc:
            raise AnchorUnreachable("lost connection to the container anchor") from exc
        finally:
            sock.close()
        if not data:
            raise AnchorUnreachable("container anchor closed the connection")
        return protocol.reply_or_raise(protocol.decode(data))

    def connect(self) -> Any:
        """The connected control socket, through /proc/self/fd/<dirfd>/ so that a
        --root of any length fits in sun_path.  The socket must be a socket of the
        caller's in the checked directory, and the process that listens on it must run
        as the caller (SO_PEERCRED): otherwise PermissionDenied, and nothing is sent."""
        import errno
        import stat

        from scrun_py.base import callerpath
        from scrun_py.base.errors import AnchorUnreachable, PermissionDenied

        fd = self.dir_fd()
        try:
            st = os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            raise AnchorUnreachable("container anchor is not running") from exc
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionDenied(rootdir.NOT_OWNER)
        try:
            sock = _connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise PermissionDenied(rootdir.NOT_OWNER) from exc
            raise AnchorUnreachable("container anchor is not running") from exc
        try:
            peer = callerpath.peer_uid(sock)
        except OSError:
            peer = -1
        if peer != os.geteuid():
            sock.close()
            raise PermissionDenied(rootdir.NOT_OWNER)
        return sock


def _connect(address: str) -> Any:
    """A unix stream socket connected to `address`.  A listener whose queue is full (a
    flood of connections from the caller's own processes) answers EAGAIN at once: the
    connection is tried again for up to CONNECT_TIMEOUT_S, as the anchor makes room.
    The C module: socket.py's wrapper imports selectors and enum (base/lean.py); a
    request needs none of its additions."""
    import _socket
    import errno
    import time

    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EAGAIN or time.monotonic() >= deadline:
                raise
        time.sleep(0.02)
