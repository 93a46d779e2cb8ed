"""doctor's check of the container engines: docker or podman has scrun-py as a runtime."""

from __future__ import annotations

import os
from pathlib import Path

from scrun_py.commands.doctor.context import Context
from scrun_py.commands.doctor.report import OK, WARN, Check


def podman_confs() -> tuple[Path, ...]:
    """The containers.conf files podman reads: the system's, $CONTAINERS_CONF, the
    user's."""
    return (Path("/etc/containers/containers.conf"),
            Path(os.environ.get("CONTAINERS_CONF", "/nonexistent")),
            Path.home() / ".config/containers/containers.conf")


def engines(ctx: Context) -> Check:
    """`docker info` lists scrun-py as a runtime, or a containers.conf names it (only a
    warning when neither does)."""
    found = []
    rc, out = ctx.probe("docker", "docker info")
    if rc == 0 and "scrun-py" in out:
        found.append("docker")
    for conf in podman_confs():
        try:
            if "scrun-py" in conf.read_text():
                found.append(f"podman ({conf})")
                break
        except OSError:
            continue
    if found:
        return Check("docker/podman runtime", OK, "scrun-py registered with "
                     + ", ".join(found))
    return Check("docker/podman runtime", WARN, "no engine has scrun-py as a runtime",
                 "see docs/docker.md and docs/podman.md")
