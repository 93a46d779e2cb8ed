"""Running as the real user when this process is root only inside a user namespace
(rootless podman runs the runtime as its namespace's 0): the `unshare` prefix that the
anchor (anchor/launch.py) and the helper steps of `ps` and `exec` (slurm/node_step.py)
put in front of what they run."""

from __future__ import annotations

import os

from scrun_py.base import procs


def host_ids() -> tuple[int, int] | None:
    """The real uid and gid when we are root only inside a user namespace, else None."""
    if os.getuid() != 0:
        return None
    uid = procs.ns_root_host_id("uid")
    if uid == 0:
        return None
    return uid, procs.ns_root_host_id("gid")


def userns_prefix() -> list[str]:
    """Run as the real user when we are root only inside a user namespace.

    Rootless podman runs the runtime as uid 0 of its user namespace.  munge then
    vouches for the real uid, but salloc/srun put getuid()/getgid() (0) in their
    requests and slurmctld rejects them ("Invalid user id").  In a nested user
    namespace that maps the real uid/gid to namespace 0, the program and every Slurm
    command it runs see the real ids.  The pid stays the same (unshare execs).

    unshare is named by its absolute path (procs.resolve_program, this process's PATH,
    absolute entries only), found when the prefix is needed; OSError (filename
    "unshare") when there is none.  The program after the prefix must be absolute too:
    unshare looks a bare name up in PATH, whose empty entry is the current directory.
    """
    ids = host_ids()
    if ids is None:
        return []
    unshare = procs.resolve_program("unshare", os.environ)
    return [unshare, "--user", f"--map-user={ids[0]}", f"--map-group={ids[1]}", "--"]
