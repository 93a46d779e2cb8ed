"""What the container's pid process (anchor/nsholder.py) becomes once its namespaces are
made: /bin/sh running a one-line waiter script.

A Python interpreter kept for the container's whole life would cost the login node
several MB per container; a POSIX shell waiting in `read` costs a few hundred kB.  The
script does what the holder did in Python: one `trap` per relayed signal, writing the
signal's number as one byte to the events pipe; `ok` on the report pipe once the traps
are set; then the exit code read from the code pipe.

Imports: os at module level, fcntl in `become` (the holder, forked from the anchor
before its imports, runs this; nothing else does).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Sequence

#: the shell the holder becomes (`become` runs it by this literal path, as every
#: program scrun-py runs is named)
SHELL = "/bin/sh"
#: where `become` moves the holder's descriptors (a POSIX shell's redirections take
#: one-digit descriptors): code pipe, events pipe, report pipe, create's readiness pipe
CODE_FD, EVENTS_FD, REPORT_FD, READY_FD = 3, 4, 5, 6


def waiter_script(relayed: Sequence[int], lost_code: int) -> str:
    """The waiter's text, one line (tools print the pid's command line as a row: `podman
    top`, `ps`): the relays (one trap per signal of `relayed`, which writes the signal's
    number as one byte to the events pipe), `ok` on the report pipe once they are set,
    then the exit code read from the code pipe (a read a relayed signal cuts short is
    read on; EOF without a code is `lost_code`).  The descriptors are its arguments:
    code pipe (moved to stdin), events pipe, report pipe (closed after `ok`); $0 is the
    title."""
    traps = [f"trap 's=1; printf \"\\{signum:03o}\" >&\"$E\"' {signum}"
             for signum in relayed]
    return "; ".join([
        "C=$1 E=$2 R=$3",
        "trap '' 13",  # SIGPIPE: the anchor gone, the code pipe's EOF follows
        *traps,
        "printf %s \"$0\" > /proc/self/comm 2>/dev/null",
        "printf 'ok\\n' >&\"$R\"",
        "eval \"exec $R>&- <&$C $C<&-\"",
        "acc=",
        "while :; do s= c=",
        "if IFS= read -r c; then acc=$acc$c; break; fi",
        "acc=$acc$c",
        "[ -n \"$s\" ] || break",
        "done",
        f"case $acc in ''|*[!0-9]*) exit {lost_code};; esac",
        "exit $((acc & 255))"])


def become(fds: Sequence[int], *, title: str, relayed: Sequence[int],
           lost_code: int) -> None:
    """Become SHELL running `waiter_script` titled `title`, with `fds` (code pipe,
    events pipe, report pipe, and create's readiness pipe when there is one) moved to
    CODE_FD, EVENTS_FD, REPORT_FD and READY_FD, kept open as before.  The process's
    command line follows the script's arguments (_own_command_line).  Returns, with
    nothing changed, when SHELL cannot be run; raises OSError when the exec fails once
    the descriptors moved (report on REPORT_FD then)."""
    if not os.access(SHELL, os.X_OK):
        return
    import fcntl

    # out of the way first: the targets may be some of the descriptors themselves
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in enumerate(high, start=CODE_FD):
        os.dup2(fd, target)  # inheritable
        os.close(fd)
    os.execv("/bin/sh", ["/bin/sh", "-c", waiter_script(relayed, lost_code), title,
                         str(CODE_FD), str(EVENTS_FD), str(REPORT_FD),
                         *_own_command_line()])


def _own_command_line() -> list[str]:
    """This process's command line (create's, or the late anchor's): the waiter keeps it
    after its own arguments, which the script ignores, so that `ps` and whoever looks
    for the processes of a --root still see whose container's pid it is."""
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            data = fh.read(1 << 16)
    except OSError:
        return []
    return [w.decode(errors="surrogateescape") for w in data.split(b"\0") if w]
