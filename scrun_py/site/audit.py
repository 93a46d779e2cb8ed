"""Audit trail: one JSON record per lifecycle event, to syslog and/or a site file.

Configured in `scrun-py.toml` next to slurm.conf:

    [audit]
    syslog = true                  # the default with an [audit] table: tag "scrun-py",
                                   # facility user; the daemon knows the sender's uid
    file = "/var/log/scrun-py/audit.jsonl"          # one file the site made for everyone
    file = "/var/log/scrun-py/{user}.jsonl"         # or one per user ({user}, {uid})

Records name the real user: under rootless podman the runtime runs as root of the
user's namespace, and the record names the user that root stands for.  A shared file
(no placeholder) is never created here: the site makes it (docs/audit.md), else one
user's first record would make it theirs alone.  A per-user file is created 0600 and
written only while it belongs to the writer.  An audit write that fails never fails
the container; it is reported on stderr.
"""

from __future__ import annotations

import os
import sys

from scrun_py.base import callerpath, procs
from scrun_py.base.records import NamedTuple

# create imports this module for every container, with or without a site file: json, re,
# pathlib and the site file's reader are imported where a record or a setting needs them
TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from scrun_py.site.site_conf import SiteConf


class AuditSettings(NamedTuple):
    file: str = ""
    syslog: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.file) or self.syslog


def load_settings(slurm_conf: str | os.PathLike[str], site: SiteConf | None = None,
                  ) -> AuditSettings:
    """The [audit] table of the site file (pass `site` when it is already loaded)."""
    import re

    from scrun_py.site import site_conf

    site = site_conf.load(slurm_conf) if site is None else site
    section = site.section("audit", ("file", "syslog"))
    file = section.get("file", "")
    use_syslog = section.get("syslog", "audit" in site.data)
    if not isinstance(file, str) or (file and not os.path.isabs(file)):
        raise site.error("audit", "file", "must be an absolute path")
    if re.search(r"\{(?!user\}|uid\})", file):
        raise site.error("audit", "file", "the only placeholders are {user} and {uid}")
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


def _append(pattern: str, uid: int, user: str, line: str) -> None:
    """Append one line to the audit file `pattern` names for this user (OSError or
    ValueError for a file that may not be written)."""
    path = pattern.replace("{user}", user).replace("{uid}", str(uid))
    per_user = path != pattern
    flags = os.O_WRONLY | os.O_APPEND
    try:  # the site's trail: never through a symlink, never a FIFO or a device
        fd = callerpath.open_file(path, flags | (os.O_CREAT if per_user else 0), 0o600,
                                  links=False)
    except FileNotFoundError:
        if per_user:
            raise
        raise ValueError(f"{path} does not exist (the site creates the shared audit "
                         "file)") from None
    try:
        if per_user and os.fstat(fd).st_uid != os.geteuid():
            raise ValueError(f"{path} belongs to another user: not written")
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def record(settings: AuditSettings, event: str, *, container_id: str, **fields: Any) -> None:
    if not settings.enabled:
        return
    import json

    from scrun_py.base.logs import rfc3339_now, syslog_send

    uid = procs.real_uid()
    user = procs.user_name(uid)
    rec = {"time": rfc3339_now(), "event": event, "user": user, "uid": uid,
           "container_id": container_id, **{k: v for k, v in fields.items() if v is not None}}
    line = json.dumps(rec, separators=(",", ":"), default=str)
    if settings.file:
        try:
            _append(settings.file, uid, user, line)
        except OSError as exc:
            sys.stderr.write(f"scrun-py: warning: audit file {settings.file}: {exc.strerror}\n")
        except ValueError as exc:
            sys.stderr.write(f"scrun-py: warning: audit file {exc}\n")
    if settings.syslog:
        import syslog

        syslog_send(syslog.LOG_NOTICE, line)


def emit(slurm_conf: str | os.PathLike[str], event: str, *, container_id: str,
         **fields: Any) -> None:
    """Load the site settings and record; a broken site file only warns here (create
    validates it up front)."""
    from scrun_py.base.errors import ConfigError

    try:
        settings = load_settings(slurm_conf)
    except ConfigError as exc:
        sys.stderr.write(f"scrun-py: warning: {exc}\n")
        return
    record(settings, event, container_id=container_id, engine=detect_engine(), **fields)
