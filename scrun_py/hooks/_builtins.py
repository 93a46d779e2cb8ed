"""Pure-Python bodies of the ``slurm.*`` helpers (time strings, shell commands, JSON) and
of the runtime setup (module search paths; the cluster name is slurm/conf.py's).

No lupa here: Lua values arrive through the small ``LuaBridge`` protocol, so this module
stays importable (and testable) without a Lua runtime.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping

from scrun_py.base.records import Protocol
from scrun_py.hooks.contract import TIME_STR_INFINITE, TIME_STR_INVALID

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_DEPTH = 200


# -- time strings ---------------------------------------------------------------------------

def _valid_timespec(text: str) -> bool:
    # What Slurm accepts as a time: only digits, '-' and ':', at most one '-' (before
    # any ':'), at most two ':', and enough digit groups for the separators.
    groups = dashes = colons = 0
    in_digits = False
    for ch in text:
        if ch.isascii() and ch.isdigit():
            if not in_digits:
                groups += 1
                in_digits = True
        elif ch == "-":
            in_digits = False
            dashes += 1
            if colons:
                return False
        elif ch == ":":
            in_digits = False
            colons += 1
        else:
            return False
    if not groups or dashes > 1 or colons > 2:
        return False
    needed = {0: 1, 1: 2, 2: 3}[colons] + (1 if dashes and colons else 0)
    return groups >= needed


def _c_div(num: int, den: int) -> int:
    """Integer division truncating toward zero, as C does."""
    quotient = abs(num) // den
    return quotient if num >= 0 else -quotient


def time_str2mins(text: str | None) -> int:
    """Minutes in a Slurm time string, seconds rounded up to the next minute.

    Formats: ``m``, ``m:s``, ``h:m:s``, ``d-h``, ``d-h:m``, ``d-h:m:s``. ``-1``, ``INFINITE``
    and ``UNLIMITED`` (any case) give ``TIME_STR_INFINITE`` (-1); anything else, including
    ``nil`` and the empty string, gives ``TIME_STR_INVALID`` (-2).
    """
    if not text:
        return TIME_STR_INVALID
    if text.lower() in ("-1", "infinite", "unlimited"):
        return TIME_STR_INFINITE
    if not _valid_timespec(text):
        return TIME_STR_INVALID
    if "-" in text:
        # sscanf("%d-%d:%d:%d"): "-5" reads the sign into the day count.
        day_part, _, clock = text.partition("-")
        fields = [int(f) for f in clock.split(":")] if clock else []
        if not day_part:
            days, fields = -fields[0], []
        else:
            days = int(day_part)
        hours, minutes, seconds = [*fields, 0, 0, 0][:3]
    else:
        fields = [int(f) for f in text.split(":")]
        days = 0
        if len(fields) == 3:
            hours, minutes, seconds = fields
        else:
            hours, minutes, seconds = 0, fields[0], [*fields, 0][1]
    total_s = days * 86400 + hours * 3600 + minutes * 60 + seconds
    return _c_div(total_s + 59, 60)


# -- shell commands -------------------------------------------------------------------------

def command_env(env: Mapping[str, str]) -> dict[str, str]:
    """The job env, plus our own PATH when the job env has none (so ``/bin/sh`` finds
    tools), with the absolute entries of that PATH only: the commands the script gives
    run under ``/bin/sh -c`` on the login node (or srun, through that shell), and an
    empty or relative entry would name the directory they run in (os.defpath when none
    is left: an empty PATH is the current directory to the shell)."""
    merged = dict(env)
    if "PATH" not in merged and "PATH" in os.environ:
        merged["PATH"] = os.environ["PATH"]
    if "PATH" in merged:
        merged["PATH"] = os.pathsep.join(
            entry for entry in merged["PATH"].split(os.pathsep)
            if os.path.isabs(entry)) or os.defpath
    return merged


def run_command(argv: list[str], env: Mapping[str, str]) -> tuple[int, bytes]:
    """Run ``argv`` with stdin from /dev/null and no time limit, as Slurm does; return
    (status, stdout+stderr).

    ``status`` is the exit code, 128+N for death by signal N, and 127 when the program
    cannot be started.
    """
    from scrun_py.base import procs

    result = procs.run(argv, env=command_env(env), timeout_s=None)
    return result.status, result.output


# -- runtime setup ---------------------------------------------------------------------------

def system_search_paths(version: tuple[int, int]) -> tuple[str, str]:
    """Distro module dirs (Debian, RHEL) for this Lua version, as Slurm's system Lua has them.

    lupa's bundled Lua only searches /usr/local; returns (path, cpath) suffixes.
    """
    ver = f"{version[0]}.{version[1]}"
    # CPython knows its multiarch triplet; sysconfig's data module is memory of every
    # anchor (base/lean.py)
    multiarch = getattr(sys.implementation, "_multiarch", None)
    if multiarch is None:
        import sysconfig

        multiarch = sysconfig.get_config_var("MULTIARCH")
    c_dirs = [f"/usr/lib/{multiarch}/lua/{ver}"] if multiarch else []
    c_dirs += [f"/usr/lib64/lua/{ver}", f"/usr/lib/lua/{ver}"]
    share = f"/usr/share/lua/{ver}"
    path = f";{share}/?.lua;{share}/?/init.lua" if os.path.isdir(share) else ""
    cpath = "".join(f";{d}/?.so" for d in c_dirs if os.path.isdir(d))
    return path, cpath


# -- JSON <-> Lua ---------------------------------------------------------------------------

class LuaTableLike(Protocol):
    def items(self) -> Iterable[tuple[Any, Any]]: ...


class LuaBridge(Protocol):
    """What the JSON conversion needs from the Lua runtime."""

    def kind_of(self, value: Any) -> str:
        """``"null"``, ``"array"``, ``"object"``, ``"table"`` or a Lua type name."""
        ...

    def new_table(self, kind: str) -> Any:
        """A new Lua table tagged ``"array"`` or ``"object"``."""
        ...


class JsonConversionError(ValueError):
    pass


def _key_to_str(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        raise JsonConversionError("a boolean table key cannot be a JSON object key")
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return str(int(key)) if key.is_integer() else repr(key)
    raise JsonConversionError("a table used as a key cannot be a JSON object key")


def _is_sequence(keys: list[Any]) -> bool:
    ints = [k for k in keys if isinstance(k, int) and not isinstance(k, bool)]
    return len(ints) == len(keys) and sorted(ints) == list(range(1, len(keys) + 1))


def lua_to_py(value: Any, bridge: LuaBridge, depth: int = 0) -> Any:
    """Turn a Lua value (as lupa hands it over) into plain JSON-able Python data."""
    if depth > MAX_DEPTH:
        raise JsonConversionError(f"nesting deeper than {MAX_DEPTH} (a cycle?)")
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JsonConversionError(f"{value} is not a valid JSON number")
        return value
    kind = bridge.kind_of(value)
    if kind == "null":
        return None
    if kind not in ("array", "object", "table"):
        raise JsonConversionError(f"a Lua {kind} cannot be converted to JSON")
    table: LuaTableLike = value
    pairs = list(table.items())
    keys = [k for k, _ in pairs]
    if kind == "array" or (kind == "table" and pairs and _is_sequence(keys)):
        # A marked array may have holes (nil from json.decode's null); they become null.
        if not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in keys):
            raise JsonConversionError("a table marked as a JSON array has keys other than "
                                      "positive integers")
        length = max(keys, default=0)
        if length > 2 * len(keys) + 16:
            raise JsonConversionError("a table marked as a JSON array is too sparse")
        by_index = dict(pairs)
        return [lua_to_py(by_index.get(i), bridge, depth + 1) for i in range(1, length + 1)]
    return {_key_to_str(k): lua_to_py(v, bridge, depth + 1) for k, v in pairs}


def py_to_lua(value: Any, bridge: LuaBridge, null: Any) -> Any:
    """Turn parsed JSON into Lua values: tagged tables, ``null`` for JSON null."""
    if value is None:
        return null
    if isinstance(value, int) and not isinstance(value, bool):
        return value if INT64_MIN <= value <= INT64_MAX else float(value)
    if isinstance(value, dict):
        table = bridge.new_table("object")
        for key, item in value.items():
            converted = py_to_lua(item, bridge, null)
            if converted is not None:
                table[key] = converted
        return table
    if isinstance(value, list):
        table = bridge.new_table("array")
        for index, item in enumerate(value, start=1):
            converted = py_to_lua(item, bridge, null)
            if converted is not None:
                table[index] = converted
        return table
    return value


def _reject_constant(name: str) -> None:
    raise JsonConversionError(f"{name} is not valid JSON")


def parse_json(text: str) -> Any:
    import json  # slurm.json_* only: the anchor does not load json for every container

    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise JsonConversionError(f"invalid JSON: {exc}") from None


def dump_json(data: Any, pretty: bool) -> str:
    import json

    if pretty:
        return json.dumps(data, ensure_ascii=False, sort_keys=True, indent=2)
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))

