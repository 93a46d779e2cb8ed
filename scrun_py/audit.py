"""Audit trail: one JSON record per lifecycle event, to a site file and/or syslog.

Configured in `scrun-py.toml` next to slurm.conf:

    [audit]
    file = "/var/log/scrun-py/audit.jsonl"   # append-only JSON lines
    syslog = true                            # tag "scrun-py", facility user

An audit write that fails never fails the container; it is reported on stderr.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

from scrun_py import procs, site_conf
from scrun_py.errors import ConfigError
from scrun_py.site_conf import SiteConf


class AuditSettings(NamedTuple):
    file: str = ""
    syslog: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.file) or self.syslog


def load_settings(slurm_conf: Path, site: SiteConf | None = None) -> AuditSettings:
    """The [audit] table of the site file (pass `site` when it is already loaded)."""
    site = site_conf.load(slurm_conf) if site is None else site
    section = site.section("audit", ("file", "syslog"))
    file, use_syslog = section.get("file", ""), section.get("syslog", False)
    if not isinstance(file, str) or (file and not os.path.isabs(file)):
        raise site.error("audit", "file", "must be an absolute path")
    if not isinstance(use_syslog, bool):
        raise site.error("audit", "syslog", "must be true or false")
    return AuditSettings(file=file, syslog=use_syslog)


def detect_engine() -> str:
    """Who called us: docker (containerd shim), podman (conmon or podman), or the CLI."""
    comm = procs.comm(os.getppid())
    if not comm:
        return "unknown"
    if comm.startswith("containerd-shim"):
        return "docker"
    if comm in ("conmon", "podman"):
        return "podman"
    return "cli"


def record(settings: AuditSettings, event: str, *, container_id: str, **fields: Any) -> None:
    if not settings.enabled:
        return
    from scrun_py.logs import append_line, rfc3339_now, syslog_send

    uid = os.getuid()
    rec = {"time": rfc3339_now(), "event": event, "user": procs.user_name(uid), "uid": uid,
           "container_id": container_id, **{k: v for k, v in fields.items() if v is not None}}
    line = json.dumps(rec, separators=(",", ":"), default=str)
    if settings.file:
        try:
            append_line(settings.file, line, mode=0o600)
        except OSError as exc:
            sys.stderr.write(f"scrun-py: warning: audit file {settings.file}: {exc.strerror}\n")
    if settings.syslog:
        import syslog

        syslog_send(syslog.LOG_NOTICE, line)


def emit(slurm_conf: Path, event: str, *, container_id: str, **fields: Any) -> None:
    """Load the site settings and record; a broken site file only warns here (create
    validates it up front)."""
    try:
        settings = load_settings(slurm_conf)
    except ConfigError as exc:
        sys.stderr.write(f"scrun-py: warning: {exc}\n")
        return
    record(settings, event, container_id=container_id, engine=detect_engine(), **fields)
