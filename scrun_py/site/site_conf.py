"""The site file `scrun-py.toml`, next to slurm.conf: one table per concern.

    [audit]    -> scrun_py.site.audit
    [exec]     -> exec_runtime (the node runtime `exec` and `ps` run)
    [policy]   -> scrun_py.site.policy
    [staging]  -> scrun_py.site.staging_conf (the shipped staging script's settings)
    [trust]    -> scrun_py.site.trust

A missing file is an empty one.  An unknown table or key is an error, so that a typo
(`[polcy]`) cannot silently switch a site's policy off.

The file is read next to the slurm.conf in use (base/conf_lookup.py: -f, SLURM_CONF, the
compiled-in default), with two exceptions that both give the system's file,
/etc/slurm/scrun-py.toml (next to the compiled-in default slurm.conf, whether or not
that slurm.conf exists):
- the slurm.conf in use is a configless copy (/run/slurm/conf): sackd and slurmd copy
  Slurm's files only, so a configless login node keeps its site file in /etc/slurm;
- the system's file says `[trust] site_files = "system"`: then the system's file and
  scrun.lua are used whatever slurm.conf the caller names.
scrun.lua is looked for next to the slurm.conf in use (`SiteConf.directory`); when the
system's file pins the site files, next to the system's slurm.conf (`system_lua_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path

from scrun_py.base import layout
from scrun_py.base.errors import ConfigError
from scrun_py.base.layout import SITE_FILE, TRUST_KEYS
from scrun_py.base.records import NamedTuple

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

SECTIONS = ("audit", "exec", "policy", "staging", "trust")


class SiteConf(NamedTuple):
    path: Path
    data: dict[str, Any] = {}  # noqa: RUF012 - never changed in place
    # the [trust] table of the system's file (the only one a caller cannot choose)
    system_trust: dict[str, Any] = {}  # noqa: RUF012 - never changed in place
    system_path: Path | None = None  # the system's file, where system_trust comes from
    lua_dir: Path | None = None  # where scrun.lua is, when not beside this file

    @property
    def directory(self) -> Path:
        """Where scrun.lua is looked for."""
        return self.path.parent if self.lua_dir is None else self.lua_dir

    def section(self, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """The table `name` ({} if absent), with every key checked against `keys`."""
        table = self.data.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{self.path}: [{name}] must be a table")
        unknown = sorted(set(table) - set(keys))
        if unknown:
            raise ConfigError(f"{self.path}: [{name}]: unknown key {unknown[0]}")
        return table

    def error(self, section: str, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: [{section}] {key}: {message}")


def site_file(slurm_conf: str | os.PathLike[str]) -> Path:
    return Path(slurm_conf).parent / SITE_FILE


def system_file() -> Path:
    """The site file next to the compiled-in default slurm.conf (whether or not that
    exists): a caller's -f, SLURM_CONF or PATH does not move it."""
    return site_file(Path(layout.DEFAULT_SLURM_CONF))


def system_lua_dir(system: Path) -> Path:
    """Where the system's scrun.lua is: beside the system's file `system`, unless that
    is the compiled-in default's directory, which has no slurm.conf, and the configless
    copy exists (a configless login node: sackd copies scrun.lua with slurm.conf)."""
    if (system.parent == Path(layout.DEFAULT_SLURM_CONF).parent
            and not os.path.exists(layout.DEFAULT_SLURM_CONF)
            and os.path.exists(layout.CONFIGLESS_SLURM_CONF)):
        return Path(layout.CONFIGLESS_SLURM_CONF).parent
    return system.parent


#: the largest scrun-py.toml read (a site file is a few lines)
MAX_SITE_FILE_BYTES = 1 << 20


def _read(path: Path) -> dict[str, Any] | None:
    """The file's tables; None when there is no file.  Read through base/callerpath
    (at most MAX_SITE_FILE_BYTES): a FIFO, a device or another user's symlink in its
    place is refused at once."""
    from scrun_py.base import callerpath

    try:
        text = callerpath.read(str(path), MAX_SITE_FILE_BYTES, "a site file").decode()
    except FileNotFoundError:
        return None  # the common case: no tomllib import on every verb
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown table [{unknown[0]}] "
                          f"(known: {', '.join(SECTIONS)})")
    return data


def load(slurm_conf: str | os.PathLike[str], system: Path | None = None) -> SiteConf:
    """The site file in use for `slurm_conf` (`system`: the system's file, for tests)."""
    system = system_file() if system is None else system
    system_data = _read(system) or {}
    trust = system_data.get("trust", {})
    if not isinstance(trust, dict):
        raise ConfigError(f"{system}: [trust] must be a table")
    unknown = sorted(set(trust) - set(TRUST_KEYS))
    if unknown:  # checked whatever file is in use: a typo must not switch a setting off
        raise ConfigError(f"{system}: [trust]: unknown key {unknown[0]}")
    pinned = trust.get("site_files", "any")
    if pinned not in ("any", "system"):
        raise ConfigError(f'{system}: [trust] site_files: must be "any" or "system"')
    path = site_file(slurm_conf)
    if pinned == "system":
        return SiteConf(system, system_data, trust, system, system_lua_dir(system))
    if path == system:
        return SiteConf(system, system_data, trust, system)
    from scrun_py.base.conf_lookup import in_configless_dir

    if in_configless_dir(slurm_conf):  # no site file there: the system's applies
        return SiteConf(system, system_data, trust, system, Path(slurm_conf).parent)
    return SiteConf(path, _read(path) or {}, trust, system)


def exec_runtime(slurm_conf: str | os.PathLike[str]) -> str | None:
    """`[exec] runtime`: the node runtime `exec` runs, with its global options and
    oci.conf's pattern tokens (`crun --rootless=true --root=/run/crun-%u`); None when
    unset (then RunTimeKill's runtime and options)."""
    site = load(slurm_conf)
    value = site.section("exec", ("runtime",)).get("runtime")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise site.error("exec", "runtime", "must be a non-empty string")
    return value
