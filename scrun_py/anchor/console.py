"""Terminal support: a pty whose master goes to the engine over --console-socket."""

from __future__ import annotations

import os
import socket

from scrun_py.base.errors import ScrunError


def open_pty() -> tuple[int, int, str]:
    master, slave = os.openpty()
    os.set_inheritable(slave, False)
    return master, slave, os.ttyname(slave)


def send_master(console_socket: str, master: int, name: str) -> None:
    """runc's contract: one message, data = pty name, SCM_RIGHTS = master fd."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(console_socket)
            socket.send_fds(sock, [name.encode()], [master])
    except OSError as exc:
        raise ScrunError(f"cannot send the terminal to --console-socket {console_socket}: "
                         f"{exc.strerror or exc}") from exc
