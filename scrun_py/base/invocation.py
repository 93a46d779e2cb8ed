"""Resolved global options of one invocation.  No I/O beyond reading the environment.

`state`, `start`, `kill` and `delete` build an Invocation on every call: this module
imports os alone (paths are kept as strings; flags and logs are imported when a caller
asks for them, pathlib only by the `slurm_conf` property).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any, TypedDict, Unpack

    from scrun_py.base.conf_lookup import Choice

    class Diagnostics(TypedDict, total=False):
        """What and how an invocation logs: --log-format, --debug, -v, --log-level (each
        optional, with Invocation's defaults).  Keyword arguments of Invocation and
        Invocation.resolve, a TypedDict for mypy only: a records.py record would import
        collections into `state`."""

        log_format: str
        debug: bool
        verbosity: int
        log_level: str | None

__all__ = ["Invocation", "default_root", "log_file_name"]


def _path(name: str) -> Path:
    from pathlib import Path

    return Path(name)


def _default_levels() -> tuple[int, int, int]:
    from scrun_py.base import flags

    return (flags.level(flags.DEFAULT_LEVELS["stderr"]).number,
            flags.level(flags.DEFAULT_LEVELS["file"]).number,
            flags.level(flags.DEFAULT_LEVELS["syslog"]).number)


class Invocation:
    """Global options, resolved once (by the click group or the click-free entry) and
    passed to every verb.  Immutable; paths absolute, kept as strings."""

    __slots__ = ("_levels", "debug", "log_format", "log_level", "log_name", "root_dir",
                 "slurm_conf_name", "verbosity")
    root_dir: str
    log_name: str | None
    log_format: str
    debug: bool
    verbosity: int
    slurm_conf_name: str | None
    log_level: str | None
    _levels: tuple[int, int, int] | None

    def __init__(self, *, root_dir: str, log_name: str | None = None,
                 slurm_conf_name: str | None = None,
                 levels: tuple[int, int, int] | None = None,
                 **diagnostics: Unpack[Diagnostics]) -> None:
        set_ = object.__setattr__
        set_(self, "root_dir", root_dir)
        set_(self, "log_name", log_name)
        set_(self, "log_format", diagnostics.get("log_format", "text"))
        set_(self, "debug", diagnostics.get("debug", False))
        set_(self, "verbosity", diagnostics.get("verbosity", 0))
        set_(self, "slurm_conf_name", slurm_conf_name)
        set_(self, "log_level", diagnostics.get("log_level"))
        set_(self, "_levels", levels)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Invocation is immutable ({name})")

    @classmethod
    def resolve(cls, *, root: str | Path | None, log_path: str | Path | None = None,
                slurm_conf: str | Path | None = None,
                environ: Mapping[str, str] | None = None,
                **diagnostics: Unpack[Diagnostics]) -> Invocation:
        """Global options as given on the command line → absolute paths and defaults.

        The diagnostics levels come from SCRUN_*DEBUG, --log-level, --debug and -v; a
        bad level word is a ConfigError naming its source.  Without any of them the
        defaults apply, looked up when first needed.
        """
        debug = diagnostics.get("debug", False)
        verbosity = diagnostics.get("verbosity", 0)
        log_level = diagnostics.get("log_level")
        log_name = log_file_name(log_path)
        if log_path is not None and log_name is None:
            from scrun_py.base.errors import ConfigError

            raise ConfigError(f"--log {log_path}: only a file ([file:]PATH) is supported; "
                              "for syslog use SCRUN_SYSLOG_DEBUG")
        env = os.environ if environ is None else environ
        levels = None
        if debug or verbosity or log_level is not None or any(
                k.startswith("SCRUN_") and k.endswith("DEBUG") for k in env):
            from scrun_py.base.logs import env_levels

            lv = env_levels(env, debug=debug, verbosity=verbosity, log_level=log_level)
            levels = (lv["stderr"], lv["file"], lv["syslog"])
        return cls(root_dir=(os.path.abspath(root) if root is not None
                             else default_root()),
                   log_name=log_name,
                   slurm_conf_name=(os.path.abspath(slurm_conf) if slurm_conf is not None
                                    else None),
                   levels=levels, **diagnostics)

    @property
    def slurm_conf(self) -> Path | None:
        """slurm_conf_name as a Path (anchor/launch.py reads it)."""
        return None if self.slurm_conf_name is None else _path(self.slurm_conf_name)

    @property
    def levels(self) -> tuple[int, int, int]:
        """stderr, --log file and syslog levels of this process (logs.env_levels)."""
        return self._levels if self._levels is not None else _default_levels()

    def note(self, word: str, msg: str, **fields: Any) -> None:
        """Log one record at level `word` from a short-lived command (no structlog)."""
        if word == "debug" and self._levels is None:
            return  # the default levels log nothing below info (the unit tests check)
        from scrun_py.base.logs import Sinks

        stderr, file, syslog = self.levels
        sinks = Sinks(stderr_level=stderr, file_level=file, syslog_level=syslog,
                      log_path=self.log_name, log_format=self.log_format)
        if sinks.enabled(word):
            sinks.emit(word, msg, fields)

    def slurm_conf_file(self) -> str:
        """The slurm.conf in use, found as Slurm's clients find theirs: -f, else
        $SLURM_CONF, else the compiled-in default, else the configless copy; the
        compiled-in default when none is found (base/conf_lookup.py)."""
        if self.slurm_conf_name is not None:
            return self.slurm_conf_name
        return self.slurm_conf_choice().path

    def slurm_conf_choice(self) -> Choice:
        """The slurm.conf in use, the rule that chose it and where it looked."""
        from scrun_py.base import conf_lookup

        return conf_lookup.find(self.slurm_conf_name, os.environ)


def log_file_name(value: str | Path | None) -> str | None:
    """The file of `--log`: a path, or crun's `file:PATH`; None for crun's other
    destinations (`syslog:ID`, `journald:ID`) and for no --log."""
    if value is None:
        return None
    text = str(value)
    if text.startswith("file:"):
        return text.removeprefix("file:")
    if text.startswith(("syslog:", "journald:")):
        return None
    return text


def default_root(environ: dict[str, str] | None = None, uid: int | None = None) -> str:
    """Where spool dirs live when --root is not given (podman passes none).

    Slurm's scrun documents `/run/user/<uid>/scrun/` but uses the bare runtime
    dir ($XDG_RUNTIME_DIR itself); we use the documented `scrun` sub-directory.
    A string: every verb resolves it, and pathlib is an import they do without
    (base/lean.py).
    """
    env = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "scrun")
    if uid == 0:
        return "/run/scrun"
    run_user = f"/run/user/{uid}"
    if os.access(run_user, os.W_OK):
        return os.path.join(run_user, "scrun")
    tmp = env.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, f"scrun-{uid}")
