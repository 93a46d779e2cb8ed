"""Logging: the fatal-error record every command writes, the sinks, the level ladder's
sources, the anchor's logger, and the (once per process) structlog setup of `doctor`.

The anchor logs through `Logger`, which writes to the sinks directly: importing
structlog imports asyncio, whose memory and start-up every anchor would carry
(base/lean.py).

The fatal path must be cheap (no structlog import) and must write
`{"level":"error","msg":…,"time":RFC3339}` to --log, because containerd reads
the last error record back from that file.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Mapping, MutableMapping

from scrun_py.base import flags

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:  # create imports this module for its clock: json and pathlib stay out
    from pathlib import Path
    from typing import Any

# Level word → stdlib-style number, for every word of the ladder (flags.LEVELS).
LEVELS: dict[str, int] = {lvl.word: lvl.number for lvl in flags.LEVELS}
# The event key that carries a ladder word the structlog method names cannot say
# (verbose, debug2..debug5): log_at() sets it, Sinks reads it.
LEVEL_KEY = "scrun_level"
SYSLOG_IDENT = "scrun-py"


def level_word(value: str, source: str, *, extra: tuple[str, ...] = ()) -> str:
    """The canonical word of a level given as `source`; ConfigError naming it otherwise."""
    from scrun_py.base.errors import ConfigError

    try:
        return flags.level_word(value, extra=extra)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def rfc3339_now() -> str:
    """UTC, to the microsecond (time, not datetime: the anchor imports this module, and
    datetime is memory it does without: base/lean.py)."""
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def one_line(text: str) -> str:
    """`text` as one line of visible characters: each C0 and C1 control character, DEL,
    the Unicode line and paragraph separators and each lone surrogate (a file name's
    undecodable byte) written as its escape (`\\n`, `\\t`, `\\r`, `\\x1b`, `\\u2028`,
    `\\udc80`), so that a value from an image or a caller can neither end a log line
    nor drive the terminal.  Everything else, a backslash too, is left as it is."""
    if text.isprintable():  # none of them (the common case, without the table)
        return text
    return text.translate(_escapes())


@functools.cache
def _escapes() -> dict[int, str]:
    """one_line's table, made once per process and only when a line needs it."""
    table = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
    table.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
    table.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0xD800, 0xE000))})
    return table


def format_record(level: str, msg: str, fmt: str, fields: Mapping[str, Any] | None = None) -> str:
    """One record, as one line whatever `msg` and `fields` hold: JSON (json.dumps's
    ASCII escapes every control character and lone surrogate) or `key=value` text (each
    value in JSON, each key through one_line)."""
    now = rfc3339_now()
    if fmt == "json":
        record = {"level": level, "msg": msg, "time": now}
        if fields:
            record.update({k: v for k, v in fields.items() if k not in record})
        return _dumps(record, (",", ":"))
    extra = "".join(f" {one_line(str(k))}={_dumps(v)}" for k, v in (fields or {}).items())
    return f"time={_dumps(now)} level={level} msg={_dumps(msg)}{extra}"


def _dumps(value: Any, separators: tuple[str, str] | None = None) -> str:
    """`value` in JSON on one line (anything else json cannot write as its str()); what
    json refuses (a key that is not a string, NaN, a cycle) is written with str() too,
    down to the mapping's values, so that the record stays valid JSON."""
    import json

    try:
        return json.dumps(value, default=str, separators=separators, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        if isinstance(value, Mapping):
            return json.dumps({str(k): _plain(v) for k, v in value.items()},
                              separators=separators)
        return json.dumps(str(value))


def _plain(value: Any) -> Any:
    """`value` when json writes it, else its str()."""
    import json

    try:
        json.dumps(value, default=str, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)
    return value


def append_line(path: Path | str, line: str, mode: int = 0o644) -> None:
    """Append one line with a single write (O_APPEND: whole lines from concurrent writers),
    through base/callerpath: never through another user's symlink, never into a FIFO."""
    from scrun_py.base import callerpath

    callerpath.append(os.fspath(path), (line + "\n").encode(), mode)


def fatal_record(msg: str, log_path: Path | str | None, log_format: str) -> None:
    """One line on stderr and one error record in --log: `msg`'s whitespace runs (line
    breaks too) made single spaces, its other control characters escaped (one_line)."""
    msg = one_line(" ".join(msg.split()))
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
    """Where log events go, each with its own level (stderr, --log file, syslog).

    Usable without structlog (`emit`, for the short-lived commands that must stay
    cheap) and as the last structlog processor (the anchor).
    """

    def __init__(self, *, stderr_level: int, file_level: int, syslog_level: int,
                 log_path: Path | str | None, log_format: str) -> None:
        self.stderr_level = stderr_level
        self.file_level = file_level if log_path is not None else LEVELS["quiet"]
        self.syslog_level = syslog_level
        self.log_path = log_path
        self.log_format = log_format

    def update(self, other: Sinks) -> None:
        """Take `other`'s levels and targets (structlog stays configured once)."""
        self.__dict__.update(other.__dict__)

    @property
    def min_level(self) -> int:
        return min(self.stderr_level, self.file_level, self.syslog_level)

    def enabled(self, word: str) -> bool:
        return flags.level(word).number >= self.min_level

    def emit(self, word: str, msg: str, fields: Mapping[str, Any] | None = None) -> None:
        """One record at level `word` (a ladder word or `warning`) to every sink that
        wants it.  Write errors are swallowed: logging never fails a command."""
        number = flags.level(word).number
        if number >= self.stderr_level:
            try:
                sys.stderr.write(format_record(word, msg, "text", fields) + "\n")
                sys.stderr.flush()
            except OSError:
                pass
        if number >= self.file_level and self.log_path is not None:
            try:
                append_line(self.log_path, format_record(word, msg, self.log_format, fields))
            except OSError:
                pass
        if number >= self.syslog_level:
            syslog_line(word, format_record(word, msg, "json", fields))

    def __call__(self, _logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        import structlog

        method_word = flags.METHOD_LEVELS.get(str(event.pop("level", method)), "info")
        word = str(event.pop(LEVEL_KEY, method_word))
        if word not in flags.LADDER and word != flags.WARNING.word:
            word = method_word
        msg = str(event.pop("msg", event.pop("event", "")))
        event.pop("time", None)
        if flags.level(word).number >= self.min_level:
            self.emit(word, msg, event)
        raise structlog.DropEvent


class Logger:
    """structlog's logger calls (debug … critical, exception, bind) written straight to
    `Sinks`, with bound fields first: the same records, without structlog."""

    def __init__(self, sinks: Sinks, context: Mapping[str, Any] | None = None) -> None:
        self.sinks = sinks
        self.context = dict(context or {})

    def bind(self, **fields: Any) -> Logger:
        return Logger(self.sinks, {**self.context, **fields})

    def debug(self, msg: str, **fields: Any) -> None:
        self._log("debug", msg, fields)

    def info(self, msg: str, **fields: Any) -> None:
        self._log("info", msg, fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self._log("warning", msg, fields)

    def error(self, msg: str, **fields: Any) -> None:
        self._log("error", msg, fields)

    def critical(self, msg: str, **fields: Any) -> None:
        self._log("critical", msg, fields)

    def exception(self, msg: str, **fields: Any) -> None:
        fields.setdefault("exc_info", True)
        self._log("error", msg, fields)

    def _log(self, method: str, msg: str, fields: dict[str, Any]) -> None:
        method_word = flags.METHOD_LEVELS[method]
        word = str(fields.pop(LEVEL_KEY, method_word))
        if word not in flags.LADDER and word != flags.WARNING.word:
            word = method_word
        exc_info = fields.pop("exc_info", None)
        if flags.level(word).number < self.sinks.min_level:
            return
        if exc_info:
            fields["exception"] = _traceback_text(exc_info)
        self.sinks.emit(word, msg, {**self.context, **fields})


def _traceback_text(exc_info: Any) -> str:
    """structlog's rendering of `exc_info` (True: the exception being handled)."""
    import traceback

    if isinstance(exc_info, BaseException):
        return "".join(traceback.format_exception(exc_info)).rstrip("\n")
    return traceback.format_exc().rstrip("\n")


def syslog_line(word: str, line: str) -> None:
    """Send one line to syslog at the priority of level `word` (flags.LEVELS)."""
    import syslog

    syslog_send(getattr(syslog, flags.level(word).syslog), line)


def syslog_send(priority: int, line: str) -> None:
    """Send one line to syslog at `priority`, through the one per-process opening."""
    import syslog

    _open_syslog()
    syslog.syslog(priority, line)


@functools.cache
def _open_syslog() -> None:
    """Opened once per process, with one facility: LOG_USER, which Slurm's scrun uses
    for its commands (scrun-py's anchor is one of the user's processes too)."""
    import syslog

    syslog.openlog(SYSLOG_IDENT, syslog.LOG_PID, syslog.LOG_USER)


def env_levels(environ: Mapping[str, str], *, debug: bool, verbosity: int,
               log_level: str | None = None,
               overrides: Mapping[str, str | None] | None = None) -> dict[str, int]:
    """stderr/file/syslog levels, from every source in flags.LEVEL_SOURCES, in order.

    `overrides` maps a sink to oci.conf's level for it (the anchor only).  A bad
    level word is a ConfigError naming where it came from.
    """
    words: dict[str, str] = {sink: word for sink, word in flags.DEFAULT_LEVELS.items()}
    for var, sinks in flags.LEVEL_ENV.items():
        if var in environ:
            words.update(dict.fromkeys(sinks, level_word(environ[var], var)))
    if log_level is not None:
        words["stderr"] = words["file"] = level_word(log_level, "--log-level",
                                                     extra=flags.CRUN_LOG_LEVELS)
    if debug:
        words["stderr"] = words["file"] = "debug"
    if verbosity:
        base = min((words["stderr"], "info"), key=lambda w: flags.level(w).number)
        words["stderr"] = flags.step(base, verbosity)
    for sink, value in (overrides or {}).items():
        if value:
            source = next((k for k, v in flags.LEVEL_OCI_CONF.items() if v == sink), sink)
            words[sink] = level_word(value, f"oci.conf {source}")
    return {sink: flags.level(word).number for sink, word in words.items()}


def log_at(logger: Any, word: str, msg: str, **fields: Any) -> None:
    """Log `msg` at any ladder word (verbose, debug2..debug5 included) through a
    `Logger` or structlog."""
    number = flags.level(word).number
    method = "debug" if number <= LEVELS["debug"] else "info" if number < 30 else \
        "warning" if number < 40 else "error" if number < 50 else "critical"
    getattr(logger, method)(msg, **{LEVEL_KEY: word}, **fields)


def configure_structlog(sinks: Sinks) -> Sinks:
    """Configure structlog for this process once; later calls only change the levels and
    targets of the sinks already installed.  Returns the installed sinks."""
    import structlog

    if structlog.is_configured():
        for proc in structlog.get_config()["processors"]:
            if isinstance(proc, Sinks):
                proc.update(sinks)
                return proc
    # Filter nothing in the bound logger: the sinks decide per record, so their levels
    # can change after the first log call (and the ladder has levels below debug).
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            sinks,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS["debug"]),
        cache_logger_on_first_use=True,
    )
    return sinks
