"""Unit tests for scrun_py.hooks.lua: loading scrun.lua, the hook calls and the slurm table."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from scrun_py.base.errors import HookError
from scrun_py.base.flags import LADDER
from scrun_py.base.logs import LEVEL_KEY, LEVELS, Sinks, configure_structlog
from scrun_py.hooks.context import HookContext, HookJob, HookPaths
from scrun_py.hooks.contract import SLURM_CONSTANTS
from scrun_py.hooks.interface import NoHooks, find_script, load_hooks
from scrun_py.hooks.lua import DEFAULT_LUA, LuaHooks, lupa_module_name

ROOT = Path(__file__).resolve().parents[2]
NOOP_HOOKS = """
function slurm_scrun_stage_in() return slurm.SUCCESS end
function slurm_scrun_stage_out() return slurm.SUCCESS end
"""

LuaScript = Callable[[str], Path]


@pytest.fixture
def lua_script() -> Iterator[LuaScript]:
    """Write a scrun.lua with the given body and return its path.

    The directory is short on purpose: Lua shortens chunk names over 60 characters in its
    messages ("...t/scrun.lua:3:"), and the tests compare whole messages.
    """
    short_dir = Path(tempfile.mkdtemp(prefix="lh", dir="/tmp"))

    def write(body: str) -> Path:
        path = short_dir / "scrun.lua"
        path.write_text(textwrap.dedent(body), encoding="utf-8")
        return path
    yield write
    shutil.rmtree(short_dir)


def make_ctx(tmp_path: Path, **changes: Any) -> HookContext:
    bundle = str(tmp_path / "bundle")
    values: dict[str, Any] = {
        "container_id": "c1", "bundle": bundle, "orig_bundle": bundle,
        "root_path": f"{bundle}/rootfs", "orig_root_path": f"{bundle}/rootfs",
        "spool_dir": str(tmp_path / "spool") + "/", "config_file": f"{bundle}/config.json",
        "job_id": 42, "user_id": 1000, "group_id": 1001,
        "env": {"SCRUN_CONTAINER_ID": "c1", "SLURM_JOB_ID": "42", "EMPTY": ""},
        "remote_argv": lambda cmd: ["/bin/sh", "-c", cmd],
    }
    values.update(changes)
    return HookContext(values.pop("container_id"),
                       HookPaths(**{name: values.pop(name) for name in HookPaths._fields}),
                       HookJob(**values))


def run_in_hook(lua_script: LuaScript, tmp_path: Path, body: str,
                **ctx_changes: Any) -> Any:
    """Run ``body`` (a Lua function body returning one value) inside stage_in; return it."""
    out = tmp_path / "result.json"
    indented = textwrap.indent(textwrap.dedent(body), "      ")
    script = lua_script(f"""
    function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,
                                  group_id, job_env)
      local function body()
{indented}
      end
      local f = assert(io.open({json.dumps(str(out))}, "w"))
      f:write(slurm.to_json(slurm.json_array({{ body() }})))
      f:close()
      return 0
    end
    function slurm_scrun_stage_out() return 0 end
    """)
    LuaHooks.load(script).stage_in(make_ctx(tmp_path, **ctx_changes))
    result = json.loads(out.read_text(encoding="utf-8"))
    return result[0] if result else None


def load_error(path: Path) -> str:
    with pytest.raises(HookError) as info:
        LuaHooks.load(path)
    return str(info.value)


class TestPrelude:
    """The Lua prelude is prelude.lua, beside hooks/lua.py, shipped as package data."""

    def test_a_file_the_package_ships(self) -> None:
        from scrun_py.hooks import lua

        assert Path(lua.__file__).with_name("prelude.lua") == Path(lua.PRELUDE_FILE)
        assert "local py, constants = ..." in lua.read_prelude()
        pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
        assert '[tool.setuptools.package-data]\n# the Lua prelude hooks/lua.py runs before ' \
               'scrun.lua\n"scrun_py.hooks" = ["*.lua"]\n' in pyproject

    def test_missing(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without its prelude the installation is broken, and the error says so."""
        from scrun_py.hooks import lua

        monkeypatch.setattr(lua, "PRELUDE_FILE", str(tmp_path / "prelude.lua"))
        with pytest.raises(HookError, match="cannot read scrun-py's Lua prelude"):
            lua.read_prelude()


class TestLoad:
    def test_syntax_error(self, lua_script: LuaScript) -> None:
        """A syntax error names the script, the line and Lua's message."""
        path = lua_script("local x = 1\nfunction (\n")
        message = load_error(path)
        assert (True, True, True) == (message.startswith(f"{path}: "), ":2:" in message,
                                      "expected" in message)

    def test_runtime_error_at_top_level(self, lua_script: LuaScript) -> None:
        """An error while running the chunk names the script, line and message."""
        path = lua_script('local x = 1\nerror("broken setup")\n')
        message = load_error(path)
        assert (True, True) == (message.startswith(f"{path}: "), ":2: broken setup" in message)

    def test_missing_hook(self, lua_script: LuaScript) -> None:
        """A script without slurm_scrun_stage_out does not load."""
        path = lua_script("function slurm_scrun_stage_in() return 0 end\n")
        assert f"{path}: missing required function slurm_scrun_stage_out" == load_error(path)

    def test_chunk_returning_one(self, lua_script: LuaScript) -> None:
        """A chunk that returns 1 is rejected, as in Slurm."""
        path = lua_script(NOOP_HOOKS + "return 1\n")
        assert f"{path}: returned 1 on load, expected 0 or nothing" == load_error(path)

    @pytest.mark.parametrize("tail", ["", "return 0\n", "return slurm.SUCCESS\n"])
    def test_chunk_returning_zero_or_nothing(self, lua_script: LuaScript, tail: str) -> None:
        """A chunk returning nothing, 0 or slurm.SUCCESS loads."""
        assert isinstance(LuaHooks.load(lua_script(NOOP_HOOKS + tail)), LuaHooks)

    def test_missing_file(self, tmp_path: Path) -> None:
        """Loading a file that does not exist is a HookError naming it."""
        path = tmp_path / "absent.lua"
        assert str(path) in load_error(path)

    def test_error_is_one_line(self, lua_script: LuaScript) -> None:
        """A multi-line Lua error message becomes one line."""
        assert "\n" not in load_error(lua_script('error("a\\nb")\n'))

    def test_unsupported_version(self, lua_script: LuaScript) -> None:
        """An unknown Lua version is rejected before anything is loaded."""
        with pytest.raises(HookError, match=r"unsupported lua version '6\.0'"):
            LuaHooks.load(lua_script(NOOP_HOOKS), "6.0")

    @pytest.mark.parametrize(("version", "module"), [
        ("5.1", "lua51"), ("lua5.3", "lua53"), ("54", "lua54"), ("Lua54", "lua54"),
        ("luajit", "luajit21"), ("LuaJIT2.0", "luajit20")])
    def test_version_names(self, version: str, module: str) -> None:
        """Version strings in the usual spellings map to lupa modules."""
        assert module == lupa_module_name(version)

    def test_default_version_is_54(self) -> None:
        """The default Lua is 5.4 (reasoning in docs/hooks.md)."""
        assert "5.4" == DEFAULT_LUA

    def test_slurm_api_outside_hook(self, lua_script: LuaScript) -> None:
        """set_bundle_path at load time is an error: there is no container yet."""
        path = lua_script(NOOP_HOOKS + 'slurm.set_bundle_path("/x")\n')
        assert "only available while a hook runs" in load_error(path)


class TestFindScript:
    def test_next_to_slurm_conf(self, tmp_path: Path) -> None:
        """scrun.lua in the slurm.conf directory is found."""
        (tmp_path / "scrun.lua").write_text(NOOP_HOOKS)
        assert str(tmp_path / "scrun.lua") == find_script(tmp_path / "slurm.conf")

    def test_override_wins(self, tmp_path: Path) -> None:
        """An override path is used even when scrun.lua exists next to slurm.conf."""
        (tmp_path / "scrun.lua").write_text(NOOP_HOOKS)
        (tmp_path / "other.lua").write_text(NOOP_HOOKS)
        assert str(tmp_path / "other.lua") == find_script(tmp_path / "slurm.conf",
                                                     str(tmp_path / "other.lua"))

    def test_no_script(self, tmp_path: Path) -> None:
        """Without a script there is nothing to load."""
        assert (None, None) == (find_script(tmp_path / "slurm.conf"), find_script(None))

    def test_missing_configured_script_is_an_error(self, tmp_path: Path) -> None:
        """A script named explicitly (SCRUN_PY_LUA) that does not exist fails, naming it."""
        with pytest.raises(HookError, match=r"absent\.lua"):
            find_script(None, str(tmp_path / "absent.lua"))

    def test_load_hooks_without_script(self, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        """load_hooks returns NoHooks, whose hooks do nothing."""
        monkeypatch.delenv("SCRUN_PY_LUA", raising=False)
        hooks = load_hooks(tmp_path / "slurm.conf")
        ctx = make_ctx(tmp_path)
        hooks.stage_in(ctx)
        assert (True, None) == (isinstance(hooks, NoHooks), hooks.stage_out(ctx))

    def test_env_override(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """SCRUN_PY_LUA names the script when no override is passed."""
        (tmp_path / "site.lua").write_text(NOOP_HOOKS)
        monkeypatch.setenv("SCRUN_PY_LUA", str(tmp_path / "site.lua"))
        hooks = load_hooks(None)
        assert (LuaHooks, str(tmp_path / "site.lua")) == (type(hooks),
                                                          str(getattr(hooks, "script", None)))

    def test_env_version(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """load_hooks reads the Lua version from SCRUN_PY_LUA_VERSION."""
        (tmp_path / "scrun.lua").write_text(NOOP_HOOKS)
        monkeypatch.setenv("SCRUN_PY_LUA_VERSION", "4.0")
        with pytest.raises(HookError, match=r"unsupported lua version '4\.0'"):
            load_hooks(tmp_path / "slurm.conf")

    def test_cluster_name(self, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
        """slurm.CLUSTER_NAME comes from ClusterName in slurm.conf."""
        monkeypatch.delenv("SCRUN_PY_LUA", raising=False)
        (tmp_path / "slurm.conf").write_text("# test\nClusterName=cl  # c\n")
        (tmp_path / "scrun.lua").write_text(NOOP_HOOKS + 'assert(slurm.CLUSTER_NAME == "cl")')
        assert isinstance(load_hooks(tmp_path / "slurm.conf"), LuaHooks)


ARGS_SCRIPT = """
local function record(name, ...)
  local f = assert(io.open(OUT, "a"))
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    local kind = type(v) == "number" and math.type(v) or type(v)
    if type(v) == "table" then
      local items = {}
      for _, e in ipairs(v) do items[#items + 1] = e end
      v = #v .. ":" .. tostring(v[0]) .. ":" .. table.concat(items, ",")
    end
    f:write(name, "\\t", kind, "\\t", tostring(v), "\\n")
  end
  f:close()
end
function slurm_scrun_stage_in(...) record("in", ...) return 0 end
function slurm_scrun_stage_out(...) record("out", ...) return 0 end
"""


class TestHookArguments:
    def test_stage_in_arguments(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """stage_in gets Slurm's 8 arguments; numbers are integers, job_env is 1-based."""
        out = tmp_path / "args.txt"
        hooks = LuaHooks.load(lua_script(f"OUT = {json.dumps(str(out))}\n" + ARGS_SCRIPT))
        ctx = make_ctx(tmp_path)
        hooks.stage_in(ctx)
        env = "SCRUN_CONTAINER_ID=c1,SLURM_JOB_ID=42,EMPTY="
        assert [
            ["in", "string", "c1"], ["in", "string", ctx.bundle],
            ["in", "string", ctx.spool_dir], ["in", "string", ctx.config_file],
            ["in", "integer", "42"], ["in", "integer", "1000"], ["in", "integer", "1001"],
            ["in", "table", f"3:nil:{env}"],
        ] == [line.split("\t") for line in out.read_text().splitlines()]

    def test_stage_out_arguments(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """stage_out gets Slurm's 10 arguments; an empty orig_bundle is nil."""
        out = tmp_path / "args.txt"
        hooks = LuaHooks.load(lua_script(f"OUT = {json.dumps(str(out))}\n" + ARGS_SCRIPT))
        ctx = make_ctx(tmp_path, orig_bundle="", bundle="/stage/b", root_path="/stage/b/r")
        hooks.stage_out(ctx)
        assert [
            ["out", "string", "c1"], ["out", "string", "/stage/b"], ["out", "nil", "nil"],
            ["out", "string", "/stage/b/r"], ["out", "string", ctx.orig_root_path],
            ["out", "string", ctx.spool_dir], ["out", "string", ctx.config_file],
            ["out", "integer", "42"], ["out", "integer", "1000"], ["out", "integer", "1001"],
        ] == [line.split("\t") for line in out.read_text().splitlines()]


def hooks_returning(lua_script: LuaScript, stage_in: str,
                    stage_out: str = "return 0") -> LuaHooks:
    return LuaHooks.load(lua_script(f"""
    function slurm_scrun_stage_in() {stage_in} end
    function slurm_scrun_stage_out() {stage_out} end
    """))


class TestStageIn:
    def test_returning_minus_one(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A return of -1 is a HookError naming the script and the hook."""
        hooks = hooks_returning(lua_script, "return -1")
        with pytest.raises(HookError) as info:
            hooks.stage_in(make_ctx(tmp_path))
        assert f"{hooks.script}: slurm_scrun_stage_in returned -1" == str(info.value)

    def test_lua_error(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A Lua error names the script, the hook, the line and the message."""
        hooks = hooks_returning(lua_script, 'error("no space")')
        with pytest.raises(HookError) as info:
            hooks.stage_in(make_ctx(tmp_path))
        assert f"{hooks.script}: slurm_scrun_stage_in: {hooks.script}:2: no space" == str(
            info.value)

    def test_non_number_is_success(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A non-numeric return is logged at info and treated as success."""
        hooks = hooks_returning(lua_script, "return true")
        with capture_logs() as logs:
            hooks.stage_in(make_ctx(tmp_path))
        assert ["lua hook returned a non-numeric value, treated as success"] == [
            e["event"] for e in logs if e["log_level"] == "info"]

    @pytest.mark.parametrize(("returned", "fails"), [
        ("nil", False), ('"0"', False), ('"3"', True), ("0.5", False), ("2", True)])
    def test_numeric_results(self, lua_script: LuaScript, tmp_path: Path, returned: str,
                             fails: bool) -> None:
        """Numbers and numeric strings are results, truncated to integers as in Slurm."""
        hooks = hooks_returning(lua_script, f"return {returned}")
        try:
            hooks.stage_in(make_ctx(tmp_path))
            failed = False
        except HookError:
            failed = True
        assert fails == failed

    def test_closed(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """Calling a hook after close() is a HookError."""
        hooks = hooks_returning(lua_script, "return 0")
        hooks.close()
        with pytest.raises(HookError, match="closed"):
            hooks.stage_in(make_ctx(tmp_path))

    def test_trace(self, lua_script: LuaScript, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> None:
        """SCRUN_TRACE_HOOKS=1 logs each call's arguments and result at debug."""
        monkeypatch.setenv("SCRUN_TRACE_HOOKS", "1")
        hooks = hooks_returning(lua_script, "return 0")
        with capture_logs() as logs:
            hooks.stage_in(make_ctx(tmp_path))
        traced = {e["event"]: e for e in logs if e["event"].startswith("lua hook ")}
        assert (42, ["SCRUN_CONTAINER_ID=c1", "SLURM_JOB_ID=42", "EMPTY="], 0) == (
            traced["lua hook called"]["args"]["job_id"],
            traced["lua hook called"]["args"]["job_env"], traced["lua hook returned"]["rc"])


class TestStageOut:
    def test_lua_error_is_logged(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A Lua error in stage_out is logged at error and returns -1 without raising."""
        hooks = hooks_returning(lua_script, "return 0", 'error("gone")')
        with capture_logs() as logs:
            rc = hooks.stage_out(make_ctx(tmp_path))
        errors = [e for e in logs if e["log_level"] == "error"]
        assert (-1, ["lua hook failed"], f"{hooks.script}:3: gone") == (
            rc, [e["event"] for e in errors], errors[0]["error"])

    @pytest.mark.parametrize(("returned", "rc"), [("5", 5), ("0", 0), ('"x"', None)])
    def test_result(self, lua_script: LuaScript, tmp_path: Path, returned: str,
                    rc: int | None) -> None:
        """stage_out returns the hook's number, or None for a non-number."""
        hooks = hooks_returning(lua_script, "return 0", f"return {returned}")
        assert rc == hooks.stage_out(make_ctx(tmp_path))


class TestPaths:
    def test_set_bundle_and_root_path(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """set_bundle_path/set_root_path change the context and return the previous value."""
        ctx = make_ctx(tmp_path)
        old_bundle, old_root = ctx.bundle, ctx.root_path
        result = run_in_hook(lua_script, tmp_path, """
            local a = slurm.set_bundle_path("/scratch/b")
            local b = slurm.set_bundle_path("/scratch/b2")
            local c = slurm.set_root_path("/scratch/b2/rootfs")
            return { a, b, c }
        """, bundle=old_bundle)
        assert [old_bundle, "/scratch/b", old_root] == result

    def test_context_is_changed(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """The caller's HookContext sees the new bundle and rootfs."""
        hooks = hooks_returning(lua_script, 'slurm.set_bundle_path("/s/b") '
                                            'slurm.set_root_path("/s/b/r") return 0')
        ctx = make_ctx(tmp_path)
        hooks.stage_in(ctx)
        assert ("/s/b", "/s/b/r") == (ctx.bundle, ctx.root_path)

    @pytest.mark.parametrize("value", ['"relative/path"', '""', "nil", "{}", '"/a\\0b"'])
    def test_invalid_path(self, lua_script: LuaScript, tmp_path: Path, value: str) -> None:
        """Anything but a non-empty absolute path string is a Lua error at the caller."""
        hooks = hooks_returning(lua_script, f"slurm.set_bundle_path({value}) return 0")
        with pytest.raises(HookError) as info:
            hooks.stage_in(make_ctx(tmp_path))
        assert (f"{hooks.script}:2: slurm.set_bundle_path: path must be a non-empty "
                "absolute path string") == str(info.value).split(": ", 2)[2]


class TestCommands:
    def test_allocator_command(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """Status is the exit code; output holds stdout and stderr together."""
        result = run_in_hook(lua_script, tmp_path, """
            local st, out = slurm.allocator_command("echo out; echo err >&2; exit 3")
            return { st, out }
        """)
        assert [3, "out\nerr\n"] == result

    def test_environment_and_stdin(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """The command sees the job env (plus PATH) and an empty stdin."""
        result = run_in_hook(lua_script, tmp_path, """
            local _, out = slurm.allocator_command(
              'printf "%s|%s|%s|" "$SLURM_JOB_ID" "${HOME-unset}" "$(cat)"; command -v cat')
            return out
        """)
        cat = shutil.which("cat", path=os.environ["PATH"])
        assert f"42|unset||{cat}\n" == result

    def test_signal_status(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A command killed by signal N has status 128+N."""
        assert 137 == run_in_hook(lua_script, tmp_path, """
            return (slurm.allocator_command("kill -9 $$"))
        """)

    def test_remote_command(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """remote_command runs the argv built by remote_argv for the command."""
        seen: list[str] = []

        def remote_argv(cmd: str) -> list[str]:
            seen.append(cmd)
            return ["/bin/sh", "-c", f"echo remote; {cmd}"]

        result = run_in_hook(lua_script, tmp_path, """
            return { slurm.remote_command("echo $SCRUN_CONTAINER_ID; exit 2") }
        """, remote_argv=remote_argv)
        assert ([2, "remote\nc1\n"], ["echo $SCRUN_CONTAINER_ID; exit 2"]) == (result, seen)


class TestLogging:
    def test_levels_and_orders(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """slurm.log takes (level, msg) or (msg, level); log_* format with string.format."""
        hooks = hooks_returning(lua_script, """
            slurm.log(0, "a")
            slurm.log("b", 2)
            slurm.log(7, "c")
            slurm.log_verbose("%s=%d", "d", 4)
            slurm.log_debug3("e")
            slurm.error("f")
            slurm.log_error("g%03d", 7)
            return 0""")
        with capture_logs() as logs:
            hooks.stage_in(make_ctx(tmp_path))
        assert [
            ("info", "lua: a", "info"), ("debug", "lua: b", "debug"),
            ("debug", "lua: c", "debug4"), ("info", "lua: d=4", "verbose"),
            ("debug", "lua: e", "debug3"), ("error", "lua: f", None),
            ("error", "lua: g007", None),
        ] == [(e["log_level"], e["event"], e.get(LEVEL_KEY)) for e in logs
              if e["event"].startswith("lua: ")]

    @pytest.mark.parametrize(("call", "word"), [
        ("slurm.log_info", "info"), ("slurm.log_verbose", "verbose"),
        ("slurm.log_debug", "debug"), ("slurm.log_debug2", "debug2"),
        ("slurm.log_debug3", "debug3"), ("slurm.log_debug4", "debug4"),
    ])
    def test_each_log_function_at_its_own_level(self, lua_script: LuaScript, tmp_path: Path,
                                                call: str, word: str) -> None:
        """Through the real sinks, slurm.log_<level> writes a record at exactly that level:
        a --log file at that level gets it, one a step less verbose does not."""
        got: dict[str, list[str]] = {}
        for file_word in (word, LADDER[LADDER.index(word) - 1]):
            log = tmp_path / f"{call}-{file_word}.log"
            sinks = configure_structlog(Sinks(
                stderr_level=LEVELS["quiet"], file_level=LEVELS[file_word],
                syslog_level=LEVELS["quiet"], log_path=log, log_format="json"))
            try:
                assert sinks.log_path == log
                hooks = hooks_returning(lua_script, f'{call}("m%d", 1) return 0')
                hooks.stage_in(make_ctx(tmp_path))
            finally:
                structlog.reset_defaults()
            records = [json.loads(line) for line in log.read_text().splitlines()] \
                if log.exists() else []
            got[file_word] = [r["level"] for r in records if r["msg"] == "lua: m1"]
        assert {word: [word], LADDER[LADDER.index(word) - 1]: []} == got

    def test_script_field(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """Log entries from the script carry the script path."""
        hooks = hooks_returning(lua_script, 'slurm.log_info("x") return 0')
        with capture_logs() as logs:
            hooks.stage_in(make_ctx(tmp_path))
        assert [str(hooks.script)] == [e["script"] for e in logs if e["event"] == "lua: x"]

    def test_bad_format_points_at_caller(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A string.format error in log_info is reported at the script's line."""
        hooks = hooks_returning(lua_script, 'slurm.log_info("%d", "x") return 0')
        with pytest.raises(HookError, match=r"scrun\.lua:2: bad argument #2"):
            hooks.stage_in(make_ctx(tmp_path))

    def test_log_user(self, lua_script: LuaScript, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
        """log_user logs at info and writes the message to stderr."""
        hooks = hooks_returning(lua_script, 'slurm.log_user("hello %s", "user") return 0')
        with capture_logs() as logs:
            hooks.stage_in(make_ctx(tmp_path))
        assert (["lua: hello user"], "hello user\n") == (
            [e["event"] for e in logs if e.get("user")], capsys.readouterr().err)


class TestConstantsAndTime:
    def test_constants(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """Every constant in SLURM_CONSTANTS is in the slurm table with its value."""
        result = run_in_hook(lua_script, tmp_path, """
            local t = {}
            for k, v in pairs(slurm) do if type(v) == "number" then t[k] = v end end
            return t
        """)
        assert dict(SLURM_CONSTANTS) == result

    @pytest.mark.parametrize(("text", "minutes"), [
        ("5", 5), ("5:30", 6), ("5:00", 5), ("1:02:03", 63), ("2-3", 3060),
        ("2-3:04", 3064), ("2-3:04:05", 3065), ("1-", 1440), ("0", 0),
        ("-1", -1), ("INFINITE", -1), ("unlimited", -1),
        ("", -2), ("abc", -2), ("1:", -2), ("1:2-3", -2), ("1-2:3:", -2), ("1:2:3:4", -2)])
    def test_time_str2mins(self, lua_script: LuaScript, tmp_path: Path, text: str,
                           minutes: int) -> None:
        """time_str2mins parses Slurm's formats; -1 is infinite, -2 invalid."""
        assert minutes == run_in_hook(lua_script, tmp_path,
                                      f"return slurm.time_str2mins({json.dumps(text)})")

    def test_time_str2mins_non_string(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A number is read as its string form; nil is invalid."""
        assert [90, -2] == run_in_hook(lua_script, tmp_path, """
            return { slurm.time_str2mins(90), slurm.time_str2mins(nil) }
        """)


def crun_spec(tmp_path: Path) -> Path:
    if shutil.which("crun") is None:
        pytest.skip("crun is not installed")
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    subprocess.run(["crun", "spec", "--rootless"], cwd=spec_dir, check=True)
    return spec_dir / "config.json"


class TestJson:
    def test_crun_spec_round_trip(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """A `crun spec --rootless` config.json survives from_json -> to_json unchanged."""
        config = crun_spec(tmp_path)
        text = config.read_text(encoding="utf-8")
        result = run_in_hook(lua_script, tmp_path, f"""
            local f = assert(io.open({json.dumps(str(config))}))
            local s = f:read("*a")
            f:close()
            return slurm.to_json(slurm.from_json(s))
        """)
        assert json.loads(text) == json.loads(result)

    def test_values(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """Nesting, unicode, integers, floats, booleans and empty containers round-trip."""
        doc = {"a": [1, 2.5, -3, True, False, "ünï €"], "o": {}, "e": [], "n": {"x": [[{}]]},
               "big": 2**62, "f": 1.0}
        result = run_in_hook(lua_script, tmp_path, f"""
            local t = slurm.from_json({json.dumps(json.dumps(doc))})
            return {{ slurm.to_json(t), math.type(t.a[1]), math.type(t.f), t.a[6] }}
        """)
        assert ([doc, "integer", "float", "ünï €"]
                == [json.loads(result[0]), *result[1:]])

    def test_null(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """JSON null becomes slurm.json_null and is written back as null."""
        result = run_in_hook(lua_script, tmp_path, """
            local t = slurm.from_json('{"a": null, "b": [1, null, 3]}')
            return { t.a == slurm.json_null, #t.b, tostring(t.b[2]), slurm.to_json(t) }
        """)
        assert [True, 3, "null", {"a": None, "b": [1, None, 3]}] == [
            *result[:3], json.loads(result[3])]

    def test_new_tables(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """Tables made in Lua: sequences are arrays, empty is {} unless marked as array."""
        result = run_in_hook(lua_script, tmp_path, """
            return slurm.to_json({ seq = {"x", "y"}, empty = {}, arr = slurm.json_array(),
                                   obj = slurm.json_object({ "x" }), sparse = { [1] = 1, [3] = 3 },
                                   keys = { [2.5] = true, [10] = false } })
        """)
        assert {"seq": ["x", "y"], "empty": {}, "arr": [], "obj": {"1": "x"},
                "sparse": {"1": 1, "3": 3}, "keys": {"2.5": True, "10": False}} == json.loads(
                    result)

    @pytest.mark.parametrize(("call", "message"), [
        ("slurm.from_json('{bad')", "slurm.from_json: invalid JSON"),
        ("slurm.to_json({ f = print })", "slurm.to_json: a Lua function cannot be"),
        ("slurm.to_json(0/0)", "is not a valid JSON number"),
        ("slurm.from_json('[NaN]')", "NaN is not valid JSON"),
    ])
    def test_errors(self, lua_script: LuaScript, tmp_path: Path, call: str,
                    message: str) -> None:
        """Conversion errors are Lua errors at the calling line."""
        hooks = hooks_returning(lua_script, f"local x = {call} return 0")
        with pytest.raises(HookError) as info:
            hooks.stage_in(make_ctx(tmp_path))
        assert (True, True) == (f"{hooks.script}:2: " in str(info.value),
                                message in str(info.value))

    def test_require_json(self, lua_script: LuaScript, tmp_path: Path) -> None:
        """require 'json' gives encode/decode with the dkjson/json.lua calling convention."""
        result = run_in_hook(lua_script, tmp_path, """
            local json = require 'json'
            local v, pos = json.decode('{"k": [1, null, "s"]}')
            local pretty = json.encode({ a = 1 }, { indent = true })
            return { json.encode(v), pos, v.k[2] == nil, pretty, require('json') == json,
                     json.null == slurm.json_null }
        """)
        assert [{"k": [1, None, "s"]}, 22, True, '{\n  "a": 1\n}', True, True] == [
            json.loads(result[0]), *result[1:]]


class TestShippedScripts:
    def test_scrun_lua(self, tmp_path: Path) -> None:
        """lua/scrun.lua loads and both hooks succeed without changing anything."""
        hooks = LuaHooks.load(ROOT / "lua" / "scrun.lua")
        ctx = make_ctx(tmp_path)
        before = (ctx.bundle, ctx.root_path)
        hooks.stage_in(ctx)
        assert (0, before) == (hooks.stage_out(ctx), (ctx.bundle, ctx.root_path))

    def test_scrun_staging_lua_loads(self) -> None:
        """lua/scrun-staging.lua loads."""
        assert isinstance(LuaHooks.load(ROOT / "lua" / "scrun-staging.lua"), LuaHooks)

    def test_scrun_staging_round_trip(self, tmp_path: Path) -> None:
        """Staging copies the rootfs, rewrites config.json, and copies changes back."""
        if shutil.which("rsync") is None:
            pytest.skip("rsync is not installed")
        config = json.loads(crun_spec(tmp_path).read_text())
        config["mounts"].append({"destination": "/data", "type": "bind",
                                 "source": str(tmp_path / "data"), "options": ["rbind", "uid=1"]})
        config["process"]["user"]["additionalGids"] = [10]
        config["linux"]["cgroupsPath"] = "/x"
        config["hooks"] = {"prestart": [{"path": "/bin/true"}]}
        bundle = tmp_path / "bundle"
        (bundle / "rootfs" / "etc").mkdir(parents=True)
        (bundle / "rootfs" / "etc" / "motd").write_text("hi\n")
        (bundle / "config.json").write_text(json.dumps(config))
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "input").write_text("in\n")
        ctx = make_ctx(tmp_path, container_id=f"test-{uuid.uuid4().hex}", user_id=os.getuid(),
                       group_id=os.getgid())
        hooks = LuaHooks.load(ROOT / "lua" / "scrun-staging.lua")
        expected_bundle = Path(f"/tmp/scrun-staging-{os.getuid()}/{ctx.container_id}")
        try:
            hooks.stage_in(ctx)
            staged = json.loads((Path(ctx.bundle) / "config.json").read_text())
            root = Path(ctx.root_path)
            (root / "etc" / "new").write_text("new\n")
            copied = [(root / "etc" / "motd").read_text(),
                      (root / "data" / "input").read_text()]
            rc = hooks.stage_out(ctx)
        finally:
            shutil.rmtree(expected_bundle, ignore_errors=True)
            with contextlib.suppress(OSError):
                expected_bundle.parent.rmdir()
        assert (
            str(expected_bundle), str(root),
            ["hi\n", "in\n"], [{"type": "user"}],
            [{"containerID": 0, "hostID": os.getuid(), "size": 1}],
            [False, False, False, False, False], 0, "new\n", False,
        ) == (
            ctx.bundle, staged["root"]["path"], copied,
            [ns for ns in staged["linux"]["namespaces"] if ns["type"] == "user"],
            staged["linux"]["uidMappings"],
            ["rlimits" in staged["process"], "additionalGids" in staged["process"]["user"],
             "cgroupsPath" in staged["linux"], "prestart" in staged["hooks"],
             any(m["destination"] == "/data" for m in staged["mounts"])],
            rc, (bundle / "rootfs" / "etc" / "new").read_text(), Path(ctx.bundle).exists(),
        )


VERSION_PROBE = """
import json, sys
from pathlib import Path
from scrun_py.hooks.context import HookContext, HookJob, HookPaths
from scrun_py.hooks.lua import LuaHooks
hooks = LuaHooks.load(Path(sys.argv[1]), sys.argv[2])
ctx = HookContext("c1", HookPaths("/b", "/b", "/b/r", "/b/r", "/s/", "/b/config.json"),
                  HookJob(42, 1000, 1000, {"A": "1"}, lambda cmd: ["/bin/sh", "-c", cmd]))
hooks.stage_in(ctx)
"""

VERSION_SCRIPT = """
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  local t = slurm.from_json('{"n": 7, "f": 0.5, "e": [], "s": "\\\\u00e9"}')
  local f = assert(io.open(OUT, "w"))
  f:write(slurm.to_json({ version = _VERSION, job = "" .. job_id, uid = user_id + 0,
                          env = job_env[1], unpack = unpack ~= nil,
                          tunpack = table.unpack ~= nil, json = t,
                          mins = slurm.time_str2mins("1:30") }))
  f:close()
  return 0
end
function slurm_scrun_stage_out() return 0 end
"""


class TestLuaVersions:
    @pytest.mark.parametrize(("version", "name"), [
        ("5.1", "Lua 5.1"), ("5.3", "Lua 5.3"), ("5.4", "Lua 5.4"), ("luajit", "Lua 5.1")])
    def test_version(self, tmp_path: Path, version: str, name: str) -> None:
        """Each selectable version runs the same script with the same results."""
        # A fresh interpreter per version: only one lupa module can be loaded per process.
        out = tmp_path / "out.json"
        script = tmp_path / "scrun.lua"
        script.write_text(f"OUT = {json.dumps(str(out))}\n" + VERSION_SCRIPT)
        proc = subprocess.run(
            [sys.executable, "-c", VERSION_PROBE, str(script), version, str(out)],
            capture_output=True, text=True, check=False)
        assert (0, {"version": name, "job": "42", "uid": 1000, "env": "A=1", "unpack": True,
                    "tunpack": True, "json": {"n": 7, "f": 0.5, "e": [], "s": "é"},
                    "mins": 2}) == (proc.returncode,
                                    json.loads(out.read_text()) if out.exists() else proc.stderr)

    def test_second_version_refused(self, tmp_path: Path) -> None:
        """Loading a second Lua version in one process is a HookError, not a crash."""
        (tmp_path / "scrun.lua").write_text(NOOP_HOOKS)
        code = ("import sys; from pathlib import Path; from scrun_py.base.errors import HookError\n"
                "from scrun_py.hooks.lua import LuaHooks\n"
                "LuaHooks.load(Path(sys.argv[1]), '5.4')\n"
                "try:\n    LuaHooks.load(Path(sys.argv[1]), '5.1')\n"
                "except HookError as e:\n    print(e)\n")
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "scrun.lua")],
                              capture_output=True, text=True, check=False)
        assert (0, "cannot load lupa.lua51: lupa.lua54 is already loaded") == (
            proc.returncode, proc.stdout.splitlines()[-1].split(" in this process")[0])
