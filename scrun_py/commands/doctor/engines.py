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


#: where root's dockerd reads its runtimes (a rootless dockerd reads the user's own)
DOCKER_DAEMON_JSON = Path("/etc/docker/daemon.json")
ROOT_ENGINE_FIX = ("run the engine rootless, one per user (docs/docker.md, docs/podman.md), "
                   "so each container is a job of its user; or accept that root's jobs "
                   "carry every user's containers")


def runtimes_name_scrun_py(runtimes: object) -> bool:
    """Whether a `runtimes` table (daemon.json's, or `docker info`'s) has a runtime whose
    name or path says scrun-py."""
    if not isinstance(runtimes, dict):
        return False
    return any("scrun-py" in str(name) or (isinstance(cfg, dict)
                                           and "scrun-py" in str(cfg.get("path", "")))
               for name, cfg in runtimes.items())


def root_dockerd(docker_rc: int, docker_out: str,
                 daemon_json: Path = DOCKER_DAEMON_JSON) -> list[str]:
    """Where a root dockerd with scrun-py shows: `docker info` of a daemon that is not
    rootless (its security options lack `name=rootless`), root's daemon.json."""
    import json

    where = []
    runtimes_text, _, security = docker_out.partition("\n")
    try:
        runtimes = json.loads(runtimes_text) if docker_rc == 0 else None
    except ValueError:
        runtimes = None
    if runtimes_name_scrun_py(runtimes) and "rootless" not in security:
        where.append("docker info")
    try:
        config = json.loads(daemon_json.read_text())
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and runtimes_name_scrun_py(config.get("runtimes")):
        where.append(str(daemon_json))
    return where


def root_podman_confs() -> tuple[Path, ...]:
    """The containers.conf files root's podman reads: the system's (which every podman
    reads), its drop-ins, root's own, and $CONTAINERS_CONF when doctor runs as root."""
    import pwd

    system = Path("/etc/containers")
    drop_ins = sorted(system.glob("containers.conf.d/*.conf"))
    env = os.environ.get("CONTAINERS_CONF") if os.getuid() == 0 else None
    return (system / "containers.conf", *drop_ins,
            Path(pwd.getpwuid(0).pw_dir) / ".config/containers/containers.conf",
            *((Path(env),) if env else ()))


def root_engines(ctx: Context, daemon_json: Path = DOCKER_DAEMON_JSON,
                 podman_files: tuple[Path, ...] | None = None) -> Check:
    """A warning when a root engine has scrun-py as a runtime: its containers become
    jobs of root (no per-user accounting, limits or fair share)."""
    found = []
    docker = root_dockerd(*ctx.probe("docker", "docker info"), daemon_json)
    if docker:
        found.append(f"root dockerd ({', '.join(docker)})")
    for conf in root_podman_confs() if podman_files is None else podman_files:
        try:
            if "scrun-py" in conf.read_text():
                found.append(f"root's podman ({conf})")
                break
        except OSError:
            continue
    if not found:
        return Check("root engine", OK, "no root engine has scrun-py as a runtime")
    return Check("root engine", WARN, f"{'; '.join(found)} has scrun-py as a runtime: its "
                 "containers become jobs of root (no per-user accounting, limits or fair "
                 "share)", ROOT_ENGINE_FIX)
