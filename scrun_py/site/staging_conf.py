"""`[staging]` of scrun-py.toml: the settings of the shipped staging script.

The anchor reads the table once, checks it here and hands it to scrun.lua as the table
`slurm.staging_settings` (hooks/lua.py); the shipped script (examples/scrun-staging.lua)
takes each key set there in place of the default at its top, so a site keeps its settings
in its own file across upgrades of the script.  A key the table does not set keeps the
script's default; Slurm's own scrun has no such table, and the script's defaults hold.

    base          STAGING_BASE: where each container's copy and config.json go ("%u": uid)
    cache         CACHE: one copy per rootfs content, overlays for each container
    cache_base    CACHE_BASE: the user's cache ("%u": uid)
    cache_max_mb  CACHE_MAX_MB: size bound of the user's cache
    cache_key     CACHE_KEY: "auto", "metadata" or "content"
    task_uppers   TASK_UPPERS: a job of several tasks uses the cache, uppers per task
    sync_back     SYNC_BACK: copy the container's rootfs changes back after it ends
    shared_paths  SHARED_PATHS: directories every node sees at the same path; a bind
                  mount from under one of them stays a bind mount (not copied)
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from scrun_py.site.site_conf import SiteConf

SECTION = "staging"
_STRINGS = ("base", "cache_base")
_BOOLS = ("cache", "task_uppers", "sync_back")
CACHE_KEYS = ("auto", "metadata", "content")
KEYS = (*_STRINGS, *_BOOLS, "cache_max_mb", "cache_key", "shared_paths")


def settings(site: SiteConf) -> dict[str, Any]:
    """The checked `[staging]` table ({} when absent); a bad value is a ConfigError that
    names the file, the key and what it must be."""
    table = site.section(SECTION, KEYS)
    for key, value in table.items():
        problem = _problem(key, value)
        if problem:
            raise site.error(SECTION, key, problem)
    return dict(table)


def _problem(key: str, value: object) -> str | None:
    if key in _STRINGS:
        ok = isinstance(value, str) and value.startswith("/") and "\n" not in value
        return None if ok else "must be an absolute path"
    if key in _BOOLS:
        return None if isinstance(value, bool) else "must be true or false"
    if key == "cache_max_mb":
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**40
        return None if ok else "must be a positive whole number of MB"
    if key == "cache_key":
        return None if value in CACHE_KEYS else f"must be one of {', '.join(CACHE_KEYS)}"
    # shared_paths
    if not isinstance(value, list) or not all(_shared_path(p) for p in value):
        return "must be a list of absolute paths other than /"
    return None


def _shared_path(path: object) -> bool:
    return (isinstance(path, str) and path.startswith("/") and "\n" not in path
            and os.path.normpath(path).strip("/") != "")
