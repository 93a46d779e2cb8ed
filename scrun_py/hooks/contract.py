"""The scrun.lua contract: hook names and argument order, the ``slurm.*`` API and constants.

Single source of truth for ``hooks.lua`` and for the docs test. Pure data: no Lua and no I/O.
"""

from __future__ import annotations

from types import MappingProxyType

from scrun_py.base.records import NamedTuple

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Final


class HookSpec(NamedTuple):
    """One global function a site script must define.

    ``args`` is the positional argument order, identical to Slurm's so that existing
    scripts run unchanged.
    """

    name: str
    args: tuple[str, ...]
    summary: str


STAGE_IN: Final = "slurm_scrun_stage_in"
STAGE_OUT: Final = "slurm_scrun_stage_out"

HOOKS: Final = MappingProxyType({
    STAGE_IN: HookSpec(
        name=STAGE_IN,
        args=("id", "bundle", "spool_dir", "config_file", "job_id", "user_id", "group_id",
              "job_env"),
        summary="after the allocation is ready, before the container step; a non-zero "
                "number or a Lua error fails the container",
    ),
    STAGE_OUT: HookSpec(
        name=STAGE_OUT,
        args=("id", "bundle", "orig_bundle", "root_path", "orig_root_path", "spool_dir",
              "config_file", "job_id", "user_id", "group_id"),
        summary="after the container step ends (only if stage_in ran); the result is "
                "only logged",
    ),
})
"""Required hooks, in the order scrun-py calls them."""

SLURM_API: Final = MappingProxyType({
    "set_bundle_path": "slurm.set_bundle_path(path) -> previous_path",
    "set_root_path": "slurm.set_root_path(path) -> previous_path",
    "allocator_command": "slurm.allocator_command(cmd) -> status, output",
    "remote_command": "slurm.remote_command(cmd) -> status, output",
    "log": "slurm.log(level, msg)",
    "error": "slurm.error(msg)",
    "log_error": "slurm.log_error(fmt, ...)",
    "log_info": "slurm.log_info(fmt, ...)",
    "log_verbose": "slurm.log_verbose(fmt, ...)",
    "log_debug": "slurm.log_debug(fmt, ...)",
    "log_debug2": "slurm.log_debug2(fmt, ...)",
    "log_debug3": "slurm.log_debug3(fmt, ...)",
    "log_debug4": "slurm.log_debug4(fmt, ...)",
    "log_user": "slurm.log_user(fmt, ...)",
    "time_str2mins": "slurm.time_str2mins(str) -> minutes",
    "to_json": "slurm.to_json(value [, pretty]) -> string",
    "from_json": "slurm.from_json(string) -> value",
    "json_array": "slurm.json_array([t]) -> t",
    "json_object": "slurm.json_object([t]) -> t",
    "to_yaml": "slurm.to_yaml(value)",
    "from_yaml": "slurm.from_yaml(string)",
})
"""Every function in the ``slurm`` table: name -> signature as written in docs/hooks.md."""

JSON_MODULE_API: Final = MappingProxyType({
    "encode": "json.encode(value [, state]) -> string",
    "decode": "json.decode(string [, pos [, nullval]]) -> value, next_pos",
})
"""The ``require 'json'`` module registered in ``package.preload``."""


def _bit(n: int) -> int:
    return 1 << n


# Values from Slurm's slurm.h / slurm_errno.h.  Slurm pushes every constant with
# lua_pushnumber; the 64-bit ones do not fit a signed Lua integer, so they stay floats here
# (as Slurm's are on every Lua version), the rest are integers.
SLURM_CONSTANTS: Final[MappingProxyType[str, int | float]] = MappingProxyType({
    # return codes
    "SUCCESS": 0,
    "ERROR": -1,
    "FAILURE": -1,
    # "no value" / "unlimited" markers
    "NO_VAL8": 0xFE,
    "NO_VAL16": 0xFFFE,
    "NO_VAL": 0xFFFFFFFE,
    "NO_VAL64": float(0xFFFFFFFFFFFFFFFE),
    "INFINITE8": 0xFF,
    "INFINITE16": 0xFFFF,
    "INFINITE": 0xFFFFFFFF,
    "INFINITE64": float(0xFFFFFFFFFFFFFFFF),
    # job description values
    "MEM_PER_CPU": float(0x8000000000000000),
    "NICE_OFFSET": 0x80000000,
    "SHARED_FORCE": 0x8000,
    "JOB_SHARED_NONE": 0x0000,
    "JOB_SHARED_OK": 0x0001,
    "JOB_SHARED_USER": 0x0002,
    "JOB_SHARED_MCS": 0x0003,
    "ALLOC_SID_ADMIN_HOLD": 0x00000001,
    "ALLOC_SID_USER_HOLD": 0x00000002,
    # mail_type bits
    "MAIL_JOB_BEGIN": _bit(0),
    "MAIL_JOB_END": _bit(1),
    "MAIL_JOB_FAIL": _bit(2),
    "MAIL_JOB_REQUEUE": _bit(3),
    "MAIL_JOB_TIME100": _bit(4),
    "MAIL_JOB_TIME90": _bit(5),
    "MAIL_JOB_TIME80": _bit(6),
    "MAIL_JOB_TIME50": _bit(7),
    "MAIL_JOB_STAGE_OUT": _bit(8),
    "MAIL_ARRAY_TASKS": _bit(9),
    "MAIL_INVALID_DEPEND": _bit(10),
    # job_desc bitflags
    "KILL_INV_DEP": _bit(0),
    "NO_KILL_INV_DEP": _bit(1),
    "GRES_ENFORCE_BIND": _bit(4),
    "SPREAD_JOB": _bit(8),
    "USE_MIN_NODES": _bit(9),
    "GRES_DISABLE_BIND": _bit(19),
    "GRES_ONE_TASK_PER_SHARING": _bit(38),
    "GRES_MULT_TASKS_PER_SHARING": _bit(39),
    "GRES_ALLOW_TASK_SHARING": _bit(40),
    "STEPMGR_ENABLED": _bit(41),
    "SPREAD_SEGMENTS": _bit(43),
    "CONSOLIDATE_SEGMENTS": _bit(44),
    "EXPEDITED_REQUEUE": _bit(45),
    # the errno names Slurm's older releases exported (and job_submit scripts return)
    "ESLURM_INVALID_PARTITION_NAME": 2000,
    "ESLURM_ACCESS_DENIED": 2002,
    "ESLURM_INVALID_NODE_COUNT": 2006,
    "ESLURM_JOB_MISSING_SIZE_SPECIFICATION": 2008,
    "ESLURM_INVALID_ACCOUNT": 2045,
    "ESLURM_INVALID_LICENSES": 2048,
    "ESLURM_ACCOUNTING_POLICY": 2050,
    "ESLURM_INVALID_TIME_LIMIT": 2051,
    "ESLURM_INVALID_QOS": 2066,
    "ESLURM_MISSING_TIME_LIMIT": 8000,
    "ESLURM_CONTAINER_NOT_CONFIGURED": 10000,
})
"""Numeric constants set in the ``slurm`` table (``CLUSTER_NAME`` is added at load time)."""

TIME_STR_INFINITE: Final = -1
"""``slurm.time_str2mins`` result for ``-1``/``INFINITE``/``UNLIMITED``.

Slurm returns ``INFINITE`` (0xffffffff) through a C ``int``, which the script sees as -1.
"""

TIME_STR_INVALID: Final = -2
"""``slurm.time_str2mins`` result for an invalid string: Slurm's ``NO_VAL`` seen through an
``int``."""
