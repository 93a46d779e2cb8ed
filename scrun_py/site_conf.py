"""The site file `scrun-py.toml`, next to slurm.conf: one table per concern.

    [audit]    -> scrun_py.audit
    [policy]   -> scrun_py.policy

A missing file is an empty one.  An unknown table or key is an error, so that a typo
(`[polcy]`) cannot silently switch a site's policy off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from scrun_py.errors import ConfigError

SITE_FILE = "scrun-py.toml"
SECTIONS = ("audit", "policy")


class SiteConf(NamedTuple):
    path: Path
    data: dict[str, Any] = {}  # noqa: RUF012 - never changed in place

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


def site_file(slurm_conf: Path) -> Path:
    return slurm_conf.parent / SITE_FILE


def load(slurm_conf: Path) -> SiteConf:
    path = site_file(slurm_conf)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return SiteConf(path)  # the common case: no tomllib import on every verb
    except (OSError, UnicodeDecodeError) as exc:
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
    return SiteConf(path, data)
