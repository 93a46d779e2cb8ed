"""What the anchor sees of the stage-in and stage-out hooks: the context a hook call
gets (context.py), the interface, which script applies (load_hooks),
and the hooks of a site without scrun.lua.  lua.py runs the script's."""

from __future__ import annotations

import os

from scrun_py.base.errors import HookError
from scrun_py.base.records import Protocol
from scrun_py.hooks.context import HookContext, structlog_logger

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any, Final

    from scrun_py.container.spool import PathArg

SCRIPT_NAME: Final = "scrun.lua"
LUA_SCRIPT_ENV: Final = "SCRUN_PY_LUA"
LUA_VERSION_ENV: Final = "SCRUN_PY_LUA_VERSION"


class Hooks(Protocol):
    def stage_in(self, ctx: HookContext) -> None: ...
    def stage_out(self, ctx: HookContext) -> int | None: ...
    def close(self) -> None: ...


class NoHooks:
    """No scrun.lua: both hooks succeed without doing anything."""

    def stage_in(self, ctx: HookContext) -> None:
        return None

    def stage_out(self, ctx: HookContext) -> int | None:
        return None

    def close(self) -> None:
        return None


def find_script(slurm_conf: PathArg | None, override: str | None = None) -> str | None:
    """``override`` if given, else ``scrun.lua`` next to ``slurm_conf``; ``None`` if no file."""
    if override:
        if os.path.isfile(override):
            return override
        # an explicitly configured script that is missing is an error, not "no hooks"
        raise HookError(f"{override}: scrun.lua not found")
    if slurm_conf is None:
        return None
    path = os.path.join(os.path.dirname(os.fspath(slurm_conf)), SCRIPT_NAME)
    return path if os.path.isfile(path) else None


def load_hooks(slurm_conf: PathArg | None, override: str | None = None,
               lua_version: str | None = None, log: Any = None,
               site_dir: PathArg | None = None,
               staging: dict[str, Any] | None = None) -> Hooks:
    """The hooks to use: ``LuaHooks`` when a script exists, else ``NoHooks``.

    ``override`` defaults to ``$SCRUN_PY_LUA`` ("" : none, whatever the environment
    says); ``site_dir`` (where ``scrun.lua`` is looked for) to slurm.conf's directory;
    ``lua_version`` to ``$SCRUN_PY_LUA_VERSION`` and then ``DEFAULT_LUA``; ``log`` and
    ``staging`` (the site's [staging] table, the script's ``slurm.staging_settings``) as
    for ``LuaHooks``.
    """
    if override is None:
        override = os.environ.get(LUA_SCRIPT_ENV) or None
    script = find_script(os.path.join(site_dir, "slurm.conf") if site_dir is not None
                         else slurm_conf, override)
    if script is None:
        (log if log is not None else structlog_logger()).debug("no scrun.lua, hooks disabled")
        return NoHooks()
    from scrun_py.hooks.lua import DEFAULT_LUA, LuaHooks
    from scrun_py.slurm.conf import cluster_name

    version = lua_version or os.environ.get(LUA_VERSION_ENV) or DEFAULT_LUA
    return LuaHooks.load(script, version, cluster_name=cluster_name(slurm_conf),
                         log=log, staging=staging)
