"""Logging: the fatal-error record every command writes, and the anchor's structlog setup.

The fatal path must be cheap (no structlog import) and must write
`{"level":"error","msg":…,"time":RFC3339}` to --log, because containerd reads
the last error record back from that file (style.md §0.1).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Slurm's level words (scrun.md §2.1) → stdlib-style numbers.
LEVELS: dict[str, int] = {
    "quiet": 100, "fatal": 50, "error": 40, "info": 20, "verbose": 15,
    "debug": 10, "debug2": 9, "debug3": 8, "debug4": 7, "debug5": 6,
}
_BY_NUMBER = ["quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3",
              "debug4", "debug5"]
_NAME_LEVEL = {"critical": 50, "error": 40, "warning": 30, "warn": 30, "info": 20,
               "debug": 10, "exception": 40}


def parse_level(value: str, source: str) -> int:
    """A Slurm debug level word or number 0-9; 'quiet' is accepted (Slurm rejects it)."""
    from scrun_py.errors import ConfigError

    v = value.strip().lower()
    if v.isdigit() and int(v) < len(_BY_NUMBER):
        v = _BY_NUMBER[int(v)]
    if v not in LEVELS:
        raise ConfigError(f"{source}: invalid debug level {value!r}")
    return LEVELS[v]


def rfc3339_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_record(level: str, msg: str, fmt: str, fields: Mapping[str, Any] | None = None) -> str:
    now = rfc3339_now()
    if fmt == "json":
        record = {"level": level, "msg": msg, "time": now}
        if fields:
            record.update({k: v for k, v in fields.items() if k not in record})
        return json.dumps(record, default=str, separators=(",", ":"))
    extra = "".join(f" {k}={json.dumps(v, default=str)}" for k, v in (fields or {}).items())
    return f"time={json.dumps(now)} level={level} msg={json.dumps(msg)}{extra}"


def append_line(path: Path | str, line: str, mode: int = 0o644) -> None:
    """Append one line with a single write (O_APPEND: whole lines from concurrent writers)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def fatal_record(msg: str, log_path: Path | None, log_format: str) -> None:
    """One line on stderr and one error record in --log."""
    msg = " ".join(msg.split())
    try:
        sys.stderr.write(f"scrun-py: {msg}\n")
        sys.stderr.flush()
    except OSError:
        pass
    if log_path is not None:
        try:
            append_line(log_path, format_record("error", msg, log_format))
        except OSError:
            pass


class Sinks:
    """Where anchor log events go, each with its own level (stderr, --log file, syslog)."""

    def __init__(self, *, stderr_level: int, file_level: int, syslog_level: int,
                 log_path: Path | None, log_format: str) -> None:
        self.stderr_level = stderr_level
        self.file_level = file_level if log_path is not None else LEVELS["quiet"]
        self.syslog_level = syslog_level
        self.log_path = log_path
        self.log_format = log_format
        self._syslog_open = False

    @property
    def min_level(self) -> int:
        return min(self.stderr_level, self.file_level, self.syslog_level)

    def __call__(self, _logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        import structlog

        level_name = str(event.pop("level", method))
        number = _NAME_LEVEL.get(level_name, 20)
        msg = str(event.pop("msg", event.pop("event", "")))
        event.pop("time", None)
        if number >= self.stderr_level:
            try:
                sys.stderr.write(format_record(level_name, msg, "text", event) + "\n")
                sys.stderr.flush()
            except OSError:
                pass
        if number >= self.file_level and self.log_path is not None:
            try:
                append_line(self.log_path, format_record(level_name, msg, self.log_format, event))
            except OSError:
                pass
        if number >= self.syslog_level:
            self._syslog(number, msg, event)
        raise structlog.DropEvent

    def _syslog(self, number: int, msg: str, fields: Mapping[str, Any]) -> None:
        import syslog

        if not self._syslog_open:
            syslog.openlog("scrun-py", syslog.LOG_PID, syslog.LOG_DAEMON)
            self._syslog_open = True
        prio = syslog.LOG_ERR if number >= 40 else syslog.LOG_INFO if number >= 20 else \
            syslog.LOG_DEBUG
        syslog.syslog(prio, format_record("info", msg, "json", fields))


def env_levels(environ: Mapping[str, str], *, debug: bool, verbosity: int,
               overrides: Mapping[str, str | None] | None = None) -> dict[str, int]:
    """stderr/file/syslog levels from SCRUN_*DEBUG, --debug/-v and oci.conf overrides."""
    levels = {"stderr": LEVELS["error"], "file": LEVELS["info"], "syslog": LEVELS["quiet"]}
    if verbosity:
        idx = min(_BY_NUMBER.index("info") + verbosity, len(_BY_NUMBER) - 1)
        levels["stderr"] = LEVELS[_BY_NUMBER[idx]]
    if debug:
        levels["stderr"] = levels["file"] = LEVELS["debug"]
    if "SCRUN_DEBUG" in environ:
        lvl = parse_level(environ["SCRUN_DEBUG"], "SCRUN_DEBUG")
        levels = {k: lvl for k in levels}
    for key, var in (("stderr", "SCRUN_STDERR_DEBUG"), ("file", "SCRUN_FILE_DEBUG"),
                     ("syslog", "SCRUN_SYSLOG_DEBUG")):
        if var in environ:
            levels[key] = parse_level(environ[var], var)
    for key, value in (overrides or {}).items():
        if value:
            levels[key] = parse_level(value, f"oci.conf {key}")
    return levels


def configure_structlog(sinks: Sinks) -> None:
    import structlog

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            sinks,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(min(sinks.min_level, 50)),
        cache_logger_on_first_use=True,
    )
