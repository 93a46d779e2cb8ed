"""The stage_out an anchor owes, kept where `delete` finds it if the anchor dies first.

Once stage_in has run, the container's directory holds `stage-out.json`: the script, its
Lua version and cluster name, and the hook context (paths, job, user, job environment).
The anchor removes it just before it runs stage_out itself.  An anchor killed before
that (SIGKILL from an engine: conmon's `--timeout`, a shim's cleanup) leaves it, and
`delete` then runs stage_out from it (`run_owed`), so that a staging script's copy of
the rootfs does not outlive the container.  The job has ended by then: a
`slurm.remote_command` fails (status 1), `slurm.allocator_command` runs as ever.
"""

from __future__ import annotations

import contextlib
import json
import os

from scrun_py.base.layout import STAGE_OUT_FILE
from scrun_py.hooks.context import HookContext, HookJob, HookPaths

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

#: what a remote command runs once the job has ended
NO_JOB_ARGV = ("/bin/sh", "-c", "echo 'scrun-py: the job has ended: no remote command' >&2; "
               "exit 1")


def path(spool_dir: str) -> str:
    return os.path.join(spool_dir, STAGE_OUT_FILE)


def save(ctx: HookContext, script: str, lua_version: str, cluster_name: str | None) -> None:
    """Record that stage_out is owed for `ctx` (best effort: a spool dir that cannot take
    the file only loses this fallback)."""
    from scrun_py.container.spool import write_atomic

    doc = {"script": script, "lua_version": lua_version, "cluster_name": cluster_name,
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


def _context(doc: dict[str, Any]) -> HookContext:
    env = doc.get("env")
    return HookContext(
        str(doc["id"]),
        HookPaths(bundle=str(doc["bundle"]), orig_bundle=str(doc.get("orig_bundle") or ""),
                  root_path=str(doc["root_path"]), orig_root_path=str(doc["orig_root_path"]),
                  spool_dir=str(doc["spool_dir"]), config_file=str(doc["config_file"])),
        HookJob(job_id=int(doc["job_id"]), user_id=int(doc["user_id"]),
                group_id=int(doc["group_id"]),
                env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
                remote_argv=lambda _cmd: list(NO_JOB_ARGV)))


def run_owed(spool_dir: str, log: Any) -> int | None:
    """Run the stage_out `spool_dir` says is owed, once (the record goes first); the
    hook's result (stage_out's: -1 for a Lua error), None when none is owed.  A record
    that cannot be read, or a script that no longer loads, is logged and dropped."""
    name = path(spool_dir)
    try:
        with open(name, "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return None
    discard(spool_dir)
    try:
        doc = json.loads(data)
        ctx = _context(doc)
        script, version = str(doc["script"]), str(doc["lua_version"])
        cluster = doc.get("cluster_name")
    except (ValueError, LookupError, TypeError, AttributeError, RecursionError) as exc:
        log.error("owed stage_out: unreadable record", error=repr(exc), file=name)
        return -1
    from scrun_py.base.errors import HookError
    from scrun_py.hooks.lua import LuaHooks

    try:
        hooks = LuaHooks.load(script, version, cluster_name=str(cluster) if cluster else None,
                              log=log)
    except HookError as exc:
        log.error("owed stage_out: scrun.lua does not load", error=str(exc), script=script)
        return -1
    try:
        log.info("owed stage_out started", container_id=ctx.container_id)
        return hooks.stage_out(ctx)
    finally:
        hooks.close()


class NoteLog:
    """A hook logger (debug/info/warning/error) over a short command's
    `Invocation.note`."""

    def __init__(self, note: Any) -> None:
        self._note = note

    def _at(self, word: str) -> Any:
        return lambda msg, **fields: self._note(word, msg, **fields)

    def __getattr__(self, name: str) -> Any:
        if name in ("debug", "info", "warning", "error"):
            return self._at(name)
        raise AttributeError(name)
