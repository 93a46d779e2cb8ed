"""Resolved global options of one invocation.  No I/O beyond reading the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrun_py import flags
from scrun_py.site_conf import DEFAULT_SLURM_CONF

__all__ = ["DEFAULT_SLURM_CONF", "Invocation", "default_root", "log_file"]


@dataclass(frozen=True)
class Invocation:
    """Global options, resolved once by the CLI group and passed to every verb."""

    root: Path
    log_path: Path | None = None
    log_format: str = "text"
    debug: bool = False
    verbosity: int = 0
    slurm_conf: Path | None = None
    log_level: str | None = None
    # stderr, --log file and syslog levels of this process (logs.env_levels)
    levels: tuple[int, int, int] = (flags.level(flags.DEFAULT_LEVELS["stderr"]).number,
                                    flags.level(flags.DEFAULT_LEVELS["file"]).number,
                                    flags.level(flags.DEFAULT_LEVELS["syslog"]).number)

    @classmethod
    def resolve(cls, *, root: str | Path | None, log_path: str | Path | None = None,
                log_format: str = "text", debug: bool = False, verbosity: int = 0,
                slurm_conf: str | Path | None = None, log_level: str | None = None,
                environ: Mapping[str, str] | None = None) -> Invocation:
        """Global options as given on the command line → absolute paths and defaults
        (one place for the click group and the click-free fast path).

        The diagnostics levels come from SCRUN_*DEBUG, --log-level, --debug and -v; a
        bad level word is a ConfigError naming its source.
        """
        from scrun_py.errors import ConfigError
        from scrun_py.logs import env_levels

        if log_path is not None and log_file(log_path) is None:
            raise ConfigError(f"--log {log_path}: only a file ([file:]PATH) is supported; "
                              "for syslog use SCRUN_SYSLOG_DEBUG")
        lv = env_levels(os.environ if environ is None else environ, debug=debug,
                        verbosity=verbosity, log_level=log_level)
        return cls(root=Path(os.path.abspath(root)) if root is not None else default_root(),
                   log_path=log_file(log_path),
                   log_format=log_format, debug=debug, verbosity=verbosity,
                   slurm_conf=(Path(os.path.abspath(slurm_conf)) if slurm_conf is not None
                               else None),
                   log_level=log_level, levels=(lv["stderr"], lv["file"], lv["syslog"]))

    def note(self, word: str, msg: str, **fields: Any) -> None:
        """Log one record at level `word` from a short-lived command (no structlog)."""
        from scrun_py.logs import Sinks

        stderr, file, syslog = self.levels
        sinks = Sinks(stderr_level=stderr, file_level=file, syslog_level=syslog,
                      log_path=self.log_path, log_format=self.log_format)
        if sinks.enabled(word):
            sinks.emit(word, msg, fields)

    def slurm_conf_path(self) -> Path:
        if self.slurm_conf is not None:
            return self.slurm_conf
        env = os.environ.get("SLURM_CONF")
        return Path(env) if env else DEFAULT_SLURM_CONF


def log_file(value: str | Path | None) -> Path | None:
    """The file of `--log`: a path, or crun's `file:PATH`; None for crun's other
    destinations (`syslog:ID`, `journald:ID`) and for no --log."""
    if value is None:
        return None
    text = str(value)
    if text.startswith("file:"):
        return Path(text.removeprefix("file:"))
    if text.startswith(("syslog:", "journald:")):
        return None
    return Path(text)


def default_root(environ: dict[str, str] | None = None, uid: int | None = None) -> Path:
    """Where spool dirs live when --root is not given.

    Slurm's scrun documents `/run/user/<uid>/scrun/` but uses the bare runtime
    dir ($XDG_RUNTIME_DIR itself); we use the documented `scrun` sub-directory.
    """
    env = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "scrun"
    if uid == 0:
        return Path("/run/scrun")
    run_user = Path(f"/run/user/{uid}")
    if os.access(run_user, os.W_OK):
        return run_user / "scrun"
    tmp = env.get("TMPDIR") or "/tmp"
    return Path(tmp) / f"scrun-{uid}"
