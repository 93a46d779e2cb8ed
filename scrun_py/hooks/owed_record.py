"""The record of the stage_out an anchor owes (`stage-out.json` in the container's
directory): written once stage_in has run, removed when the anchor runs stage_out.
hooks/owed.py runs it for `delete`.  No Lua here (lua.py writes and removes the record).
"""

from __future__ import annotations

import contextlib
import json
import os

from scrun_py.base.layout import STAGE_OUT_FILE

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.hooks.context import HookContext


def path(spool_dir: str) -> str:
    return os.path.join(spool_dir, STAGE_OUT_FILE)


def save(ctx: HookContext, script: str, lua_version: str, cluster_name: str | None,
         staging: dict[str, object] | None = None) -> None:
    """Record that stage_out is owed for `ctx` (best effort: a spool dir that cannot take
    the file only loses this fallback)."""
    from scrun_py.container.spool import write_atomic

    doc = {"script": script, "lua_version": lua_version, "cluster_name": cluster_name,
           "staging": staging or {},
           "id": ctx.container_id, "bundle": ctx.bundle, "orig_bundle": ctx.orig_bundle,
           "root_path": ctx.root_path, "orig_root_path": ctx.orig_root_path,
           "spool_dir": ctx.spool_dir, "config_file": ctx.config_file, "job_id": ctx.job_id,
           "user_id": ctx.user_id, "group_id": ctx.group_id, "env": dict(ctx.env)}
    with contextlib.suppress(OSError):
        write_atomic(path(ctx.spool_dir), json.dumps(doc).encode(), 0o600)


def discard(spool_dir: str) -> None:
    """stage_out is about to run (or is not owed): forget the record."""
    with contextlib.suppress(OSError):
        os.unlink(path(spool_dir))
