"""The stage_out an anchor owes, kept where `delete` finds it if the anchor dies first.

Once stage_in has run, the container's directory holds `stage-out.json` (owed_record.py):
the script, its Lua version and cluster name, and the hook context (paths, job, user,
job environment).  The anchor removes it just before it runs stage_out itself.  An
anchor killed before that (SIGKILL from an engine: conmon's `--timeout`, a shim's
cleanup) leaves it, and `delete` then runs stage_out from it (`run_owed`), so that a
staging script's copy of the rootfs does not outlive the container.  The job has ended
by then: a `slurm.remote_command` fails (status 1), `slurm.allocator_command` runs as
ever.
"""

from __future__ import annotations

import json

from scrun_py.hooks.context import HookContext, HookJob, HookPaths
from scrun_py.hooks.owed_record import discard, path

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

#: what a remote command runs once the job has ended
NO_JOB_ARGV = ("/bin/sh", "-c", "echo 'scrun-py: the job has ended: no remote command' >&2; "
               "exit 1")


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
        staging = dict(doc.get("staging") or {})
    except (ValueError, LookupError, TypeError, AttributeError, RecursionError) as exc:
        log.error("owed stage_out: unreadable record", error=repr(exc), file=name)
        return -1
    from scrun_py.base.errors import HookError
    from scrun_py.hooks.lua import LuaHooks

    try:
        hooks = LuaHooks.load(script, version, cluster_name=str(cluster) if cluster else None,
                              log=log, staging=staging)
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
