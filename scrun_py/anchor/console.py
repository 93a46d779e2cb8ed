"""Terminal support: a pty whose master goes to the engine over --console-socket."""

from __future__ import annotations

import os
import socket

from scrun_py.base import callerpath
from scrun_py.base.errors import ScrunError


def open_pty() -> tuple[int, int, str]:
    master, slave = os.openpty()
    os.set_inheritable(slave, False)
    return master, slave, os.ttyname(slave)


#: how long the listener of --console-socket has to take the connection
CONNECT_TIMEOUT_S = 5.0


def send_master(console_socket: str, master: int, name: str) -> None:
    """runc's contract: one message, data = pty name, SCM_RIGHTS = master fd.

    Unlike runc, the master goes only to a listener that runs as the caller or as root
    (SO_PEERCRED, read once connected): another local user who bound the path first
    would otherwise read the container's terminal and type into it.  Such a listener
    gets nothing, and the error names its uid."""

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(console_socket)
            peer = callerpath.peer_uid(sock)
            if not callerpath.peer_may_receive(peer):
                raise ScrunError(
                    f"--console-socket {console_socket}: its listener runs as uid {peer}, "
                    f"not as the caller (uid {os.geteuid()}) or root: the terminal is not "
                    "sent")
            socket.send_fds(sock, [name.encode()], [master])
    except OSError as exc:
        raise ScrunError(f"cannot send the terminal to --console-socket {console_socket}: "
                         f"{exc.strerror or exc}") from exc
