"""Run scrun.lua: load and validate the script, provide ``slurm.*``, call the two hooks.

lupa is imported here only, lazily, and only one ``lupa.luaXX`` module per process: it is
imported with RTLD_GLOBAL so that scripts can ``require`` C modules (luaposix, cjson), and a
second lupa module after that crashes the interpreter.  Default Lua version: docs/hooks.md.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from types import MappingProxyType, ModuleType

from scrun_py.base import logs
from scrun_py.base.errors import HookError
from scrun_py.base.flags import LADDER
from scrun_py.hooks import _builtins
from scrun_py.hooks.context import HookContext, structlog_logger
from scrun_py.hooks.contract import HOOKS, SLURM_CONSTANTS, STAGE_IN, STAGE_OUT

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Final

DEFAULT_LUA: Final = "5.4"
TRACE_ENV: Final = "SCRUN_TRACE_HOOKS"

LUPA_MODULES: Final = MappingProxyType({
    "5.1": "lua51", "5.2": "lua52", "5.3": "lua53", "5.4": "lua54", "5.5": "lua55",
    "luajit": "luajit21", "luajit2.1": "luajit21", "luajit2.0": "luajit20",
})
"""Accepted ``SCRUN_PY_LUA_VERSION`` values -> lupa module (also ``lua5.4``, ``lua54``, ``54``)."""

# slurm.log's level numbers 0-5: info … debug4 of the ladder
_LUA_LEVELS: Final = LADDER[LADDER.index("info"):LADDER.index("debug4") + 1]


def lupa_module_name(version: str) -> str:
    """Map a version string (``5.1`` … ``5.5``, ``luajit``) to its lupa module name."""
    key = version.strip().lower()
    if not key.startswith("luajit"):
        key = key.removeprefix("lua")
        if len(key) == 2 and key[0] == "5" and key[1].isascii() and key[1].isdigit():
            key = f"{key[0]}.{key[1]}"
    if key not in LUPA_MODULES:
        choices = ", ".join(LUPA_MODULES)
        raise HookError(f"unsupported lua version {version!r}: expected one of {choices}")
    return LUPA_MODULES[key]


def _import_lupa(module_name: str) -> ModuleType:
    full = f"lupa.{module_name}"
    if full in sys.modules:
        return sys.modules[full]
    others = sorted(name for name in sys.modules if _is_lupa_runtime(name))
    if others:
        raise HookError(f"cannot load {full}: {others[0]} is already loaded in this process "
                        "and only one lua version can be used per process")
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_GLOBAL | os.RTLD_NOW)
    try:
        return importlib.import_module(full)
    except ImportError as exc:
        raise HookError(f"{full} is not available in the installed lupa: {exc}") from exc
    finally:
        sys.setdlopenflags(flags)


def _deny_attribute(obj: object, name: object, is_setting: bool) -> object:
    # Scripts only call the callbacks; they never need Python attributes.
    raise AttributeError("python attributes are not accessible from scrun.lua")


def _is_lupa_runtime(name: str) -> bool:
    """lupa.lua54, lupa.luajit21, …: one of lupa's Lua runtimes.  (No re: the anchor
    loads scrun.lua before salloc runs; re's cost: base/lean.py.)"""
    rest = name.removeprefix("lupa.lua")
    if rest == name:
        return False
    rest = rest.removeprefix("jit")
    return rest.isascii() and rest.isdigit()


def _one_line(message: str) -> str:
    import re

    return re.sub(r"\s*\n\s*", " ", message.strip())


def _check_path(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise ValueError("path must be a non-empty absolute path string")
    return value


class _Bridge:
    def __init__(self, helpers: Any) -> None:
        self._helpers = helpers

    def kind_of(self, value: Any) -> str:
        return str(self._helpers.kind_of(value))

    def new_table(self, kind: str) -> Any:
        return self._helpers.new_table(kind)


#: the Lua run in every fresh runtime before scrun.lua (it builds ``slurm`` and ``json``),
#: a file the package ships beside this module
PRELUDE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prelude.lua")


def read_prelude() -> str:
    """The text of prelude.lua (read with open(): importlib.resources costs an import)."""
    try:
        with open(PRELUDE_FILE, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise HookError(f"{PRELUDE_FILE}: cannot read scrun-py's Lua prelude "
                        f"({exc.strerror}): the installation is incomplete") from None


class LuaHooks:
    """scrun.lua loaded into its own Lua runtime; one instance per anchor."""

    def __init__(self, script: str | os.PathLike[str], lua_version: str = DEFAULT_LUA,
                 cluster_name: str | None = None, log: Any = None,
                 staging: Mapping[str, object] | None = None) -> None:
        """Create the runtime and the ``slurm`` table; the script itself is not run yet.

        ``log``: where hook records go (the anchor's ``logs.Logger``); structlog's
        logger when None.  ``staging``: the site's [staging] table
        (site/staging_conf.py), the script's ``slurm.staging_settings`` (lists as
        arrays); an empty table when None."""
        self.script = script
        self._log_to = log
        self.lua_version = lua_version
        self.cluster_name = cluster_name
        self.staging = dict(staging or {})
        self._lupa = _import_lupa(lupa_module_name(lua_version))
        self._ctx: HookContext | None = None
        self._trace = os.environ.get(TRACE_ENV, "") not in ("", "0")
        self._runtime: Any = self._lupa.LuaRuntime(
            unpack_returned_tuples=True, register_eval=False, register_builtins=False,
            attribute_filter=_deny_attribute)
        callbacks = {
            "set_bundle_path": self._set_bundle_path, "set_root_path": self._set_root_path,
            "allocator_command": self._allocator_command,
            "remote_command": self._remote_command, "log": self._log,
            "log_error": self._log_error, "log_user": self._log_user,
            "time_str2mins": _builtins.time_str2mins, "to_json": self._to_json,
            "from_json": self._from_json,
        }
        constants: dict[str, object] = dict(SLURM_CONSTANTS)
        if cluster_name:
            constants["CLUSTER_NAME"] = cluster_name
        constants["staging_settings"] = self._runtime.table_from({
            key: self._runtime.table_from(value) if isinstance(value, list) else value
            for key, value in self.staging.items()})
        self._helpers: Any = self._runtime.execute(
            read_prelude(), self._runtime.table_from(callbacks),
            self._runtime.table_from(constants), name="=scrun-py prelude")
        self._bridge = _Bridge(self._helpers)
        package = self._runtime.globals().package
        extra_path, extra_cpath = _builtins.system_search_paths(self._runtime.lua_version)
        package.path = str(package.path) + extra_path
        package.cpath = str(package.cpath) + extra_cpath

    @classmethod
    def load(cls, path: str | os.PathLike[str], lua_version: str = DEFAULT_LUA, *,
             cluster_name: str | None = None, log: Any = None,
             staging: Mapping[str, object] | None = None) -> LuaHooks:
        """Load ``path`` with Slurm's rules; any failure is a one-line ``HookError``."""
        hooks = cls(path, lua_version, cluster_name, log, staging)
        hooks._run_script()
        return hooks

    def _run_script(self) -> None:
        ok, kind, value = self._helpers.load_script(str(self.script))
        if not ok:
            self._debug_traceback(value)
            raise HookError(f"{self.script}: {_one_line(str(kind))}")
        if kind == "number" and self._as_rc(value) != 0:
            raise HookError(f"{self.script}: returned {self._as_rc(value)} on load, "
                            "expected 0 or nothing")
        if kind not in ("number", "nil"):
            self._logger().warning("lua script returned a non-numeric value on load",
                                   script=str(self.script), kind=kind)
        missing = [name for name in HOOKS if not self._helpers.is_function(name)]
        if missing:
            raise HookError(f"{self.script}: missing required function "
                            f"{', '.join(missing)}")
        self._logger().debug("lua script loaded", script=str(self.script),
                             lua=self._runtime.lua_implementation)

    # -- hooks ------------------------------------------------------------------------------

    def stage_in(self, ctx: HookContext) -> None:
        """Run ``slurm_scrun_stage_in``; Lua error or non-zero number -> ``HookError``."""
        self._check_open()
        job_env = self._new_array([f"{k}={v}" for k, v in ctx.env.items()])
        args = (ctx.container_id, ctx.bundle, ctx.spool_dir, ctx.config_file, ctx.job_id,
                ctx.user_id, ctx.group_id, job_env)
        error, rc = self._call(STAGE_IN, ctx, args)
        if error is not None:
            raise HookError(f"{self.script}: {STAGE_IN}: {error}")
        if rc is None:
            self._logger().info("lua hook returned a non-numeric value, treated as success",
                                script=str(self.script), hook=STAGE_IN)
        elif rc != 0:
            raise HookError(f"{self.script}: {STAGE_IN} returned {rc}")
        from scrun_py.hooks import owed_record

        # delete runs stage_out from this if the anchor dies before it does (hooks/owed.py)
        owed_record.save(ctx, os.fspath(self.script), self.lua_version, self.cluster_name,
                         self.staging)

    def stage_out(self, ctx: HookContext) -> int | None:
        """Run ``slurm_scrun_stage_out``; failures are logged, never raised.

        Returns the hook's number, ``None`` for a non-numeric result and -1 for a Lua error.
        """
        from scrun_py.hooks import owed_record

        owed_record.discard(ctx.spool_dir)  # run here, once: delete must not run it again
        args = (ctx.container_id, ctx.bundle, ctx.orig_bundle or None, ctx.root_path,
                ctx.orig_root_path, ctx.spool_dir, ctx.config_file, ctx.job_id, ctx.user_id,
                ctx.group_id)
        error, rc = self._call(STAGE_OUT, ctx, args)
        log = self._logger()
        if error is not None:
            log.error("lua hook failed", script=str(self.script), hook=STAGE_OUT, error=error)
            return -1
        if rc is None:
            log.info("lua hook returned a non-numeric value", script=str(self.script),
                     hook=STAGE_OUT)
        else:
            log.info("lua hook finished", script=str(self.script), hook=STAGE_OUT, rc=rc)
        return rc

    def close(self) -> None:
        self._runtime = self._helpers = None
        self._ctx = None

    def _check_open(self) -> None:
        if self._helpers is None:
            raise HookError(f"{self.script}: lua hooks are closed")

    def _call(self, name: str, ctx: HookContext,
              args: tuple[Any, ...]) -> tuple[str | None, int | None]:
        self._check_open()
        log = self._logger()
        if self._trace:
            shown = {arg: (list(value.values()) if arg == "job_env" else value)
                     for arg, value in zip(HOOKS[name].args, args, strict=True)}
            log.debug("lua hook called", script=str(self.script), hook=name, args=shown)
        started = time.monotonic()
        self._ctx = ctx
        try:
            ok, kind, value = self._helpers.call_hook(name, *args)
        except Exception as exc:  # lupa/conversion failures outside the script's own errors
            ok, kind, value = False, str(exc), None
        finally:
            self._ctx = None
        elapsed_s = round(time.monotonic() - started, 3)
        if not ok:
            self._debug_traceback(value)
            error, rc = _one_line(str(kind)), None
        else:
            error, rc = None, (self._as_rc(value) if kind == "number" else None)
        if self._trace:
            log.debug("lua hook returned", script=str(self.script), hook=name, ok=ok,
                      kind=kind if ok else "error", rc=rc, error=error, elapsed_s=elapsed_s)
        return error, rc

    @staticmethod
    def _as_rc(value: Any) -> int:
        number = float(value)
        return int(number) if math.isfinite(number) else -1

    def _new_array(self, items: list[str]) -> Any:
        table = self._helpers.new_table("array")
        for index, item in enumerate(items, start=1):
            table[index] = item
        return table

    def _logger(self) -> Any:
        return self._log_to if self._log_to is not None else structlog_logger()

    def _debug_traceback(self, traceback: object) -> None:
        if traceback:
            self._logger().debug("lua traceback", script=str(self.script),
                                 traceback=str(traceback))

    # -- callbacks behind slurm.* -----------------------------------------------------------

    def _active(self) -> HookContext:
        if self._ctx is None:
            raise ValueError("only available while a hook runs")
        return self._ctx

    def _set_bundle_path(self, path: object) -> str:
        return self._set_path("bundle", "bundle path", path)

    def _set_root_path(self, path: object) -> str:
        return self._set_path("root_path", "root path", path)

    def _set_path(self, attr: str, what: str, path: object) -> str:
        """slurm.set_bundle_path/set_root_path: the context's `attr` becomes `path`; returns
        the previous value."""
        ctx = self._active()
        previous: str = getattr(ctx, attr)
        setattr(ctx, attr, _check_path(path))
        self._logger().debug(f"lua changed {what}", script=str(self.script),
                             previous=previous, **{attr: getattr(ctx, attr)})
        return previous

    def _allocator_command(self, cmd: str) -> tuple[int, bytes]:
        ctx = self._active()
        return self._run("allocator", ["/bin/sh", "-c", cmd], ctx, cmd)

    def _remote_command(self, cmd: str) -> tuple[int, bytes]:
        ctx = self._active()
        return self._run("remote", list(ctx.remote_argv(cmd)), ctx, cmd)

    def _run(self, where: str, argv: list[str], ctx: HookContext,
             cmd: str) -> tuple[int, bytes]:
        log = self._logger()
        log.debug("lua command started", script=str(self.script), where=where, cmd=cmd)
        started = time.monotonic()
        status, output = _builtins.run_command(argv, ctx.env)
        elapsed_s = round(time.monotonic() - started, 3)
        log.debug("lua command finished", script=str(self.script), where=where,
                  status=status, elapsed_s=elapsed_s)
        return status, output

    def _log(self, level: object, msg: str) -> None:
        try:
            index = min(max(int(float(str(level))), 0), len(_LUA_LEVELS) - 1)
        except (ValueError, OverflowError):
            index = 0
        # each at its own level of the ladder (verbose, debug2..debug4 included)
        logs.log_at(self._logger(), _LUA_LEVELS[index], f"lua: {msg}", script=str(self.script))

    def _log_error(self, msg: str) -> None:
        self._logger().error(f"lua: {msg}", script=str(self.script))

    def _log_user(self, msg: str) -> None:
        self._logger().info(f"lua: {msg}", script=str(self.script), user=True)
        sys.stderr.write(logs.one_line(msg) + "\n")  # one line, whatever the script put in
        sys.stderr.flush()

    def _to_json(self, value: Any, pretty: bool) -> str:
        return _builtins.dump_json(_builtins.lua_to_py(value, self._bridge), bool(pretty))

    def _from_json(self, text: object, null: Any) -> Any:
        if not isinstance(text, str):
            raise ValueError("expected a string")
        return _builtins.py_to_lua(_builtins.parse_json(text), self._bridge, null)
