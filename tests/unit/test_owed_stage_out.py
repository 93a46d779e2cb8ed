"""hooks/owed.py: the stage_out an anchor owes once stage_in ran, kept in the container's
directory, and run by `delete` when the anchor died before it (an engine's SIGKILL)."""

from __future__ import annotations

import json
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrun_py.base.layout import STAGE_OUT_FILE
from scrun_py.hooks import owed
from scrun_py.hooks.context import HookContext, HookJob, HookPaths
from scrun_py.hooks.lua import LuaHooks

# stage_out writes its arguments and what a remote and an allocator command give
SCRIPT = """
function slurm_scrun_stage_in(id, bundle, spool_dir) return slurm.SUCCESS end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
                               config_file, job_id, user_id, group_id)
  local rs, rout = slurm.remote_command("echo remote")
  local as, aout = slurm.allocator_command("echo $MARK")
  local fh = io.open(OUT, "w")
  fh:write(table.concat({id, bundle, tostring(orig_bundle), root_path, orig_root_path,
                         spool_dir, config_file, job_id, user_id, group_id,
                         rs, (aout:gsub("%s+$", ""))}, "|"))
  fh:close()
  return slurm.SUCCESS
end
"""


class Logged:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, object]]] = []

    def note(self, word: str, msg: str, **fields: object) -> None:
        self.records.append((word, msg, fields))


@pytest.fixture
def script(tmp_path: Path) -> Iterator[Path]:
    short = Path(tempfile.mkdtemp(prefix="ow", dir="/tmp"))
    path = short / "scrun.lua"
    path.write_text(f'OUT = "{tmp_path}/out"\n' + textwrap.dedent(SCRIPT))
    yield path
    shutil.rmtree(short)


def _ctx(tmp_path: Path) -> HookContext:
    spool = tmp_path / "spool"
    spool.mkdir(exist_ok=True)
    return HookContext("c1", HookPaths(
        bundle="/staged/c1", orig_bundle="/b", root_path="/staged/c1/rootfs",
        orig_root_path="/b/rootfs", spool_dir=str(spool), config_file="/b/config.json"),
        HookJob(job_id=42, user_id=1000, group_id=1001, env={"MARK": "from-job-env"},
                remote_argv=lambda cmd: ["/bin/sh", "-c", cmd]))


class TestOwed:
    def test_stage_in_records_and_stage_out_forgets(self, tmp_path: Path,
                                                    script: Path) -> None:
        """After stage_in the container's directory says stage_out is owed; the anchor's
        own stage_out removes that first."""
        hooks = LuaHooks.load(script, cluster_name="c9")
        ctx = _ctx(tmp_path)
        record = Path(ctx.spool_dir) / STAGE_OUT_FILE
        hooks.stage_in(ctx)
        doc = json.loads(record.read_text())
        assert (str(script), "c9", 42, {"MARK": "from-job-env"}) == (
            doc["script"], doc["cluster_name"], doc["job_id"], doc["env"])
        assert 0o600 == record.stat().st_mode & 0o777
        assert 0 == hooks.stage_out(ctx)
        assert not record.exists()

    def test_delete_runs_the_owed_stage_out_once(self, tmp_path: Path, script: Path) -> None:
        """run_owed calls stage_out with the saved arguments and job environment; a remote
        command fails (the job has ended); a second call finds nothing owed."""
        ctx = _ctx(tmp_path)
        LuaHooks.load(script).stage_in(ctx)
        log = Logged()
        assert 0 == owed.run_owed(ctx.spool_dir, owed.NoteLog(log.note))
        assert ("c1|/staged/c1|/b|/staged/c1/rootfs|/b/rootfs|"
                f"{ctx.spool_dir}|/b/config.json|42|1000|1001|1|from-job-env") == (
                    tmp_path / "out").read_text()
        assert not (Path(ctx.spool_dir) / STAGE_OUT_FILE).exists()
        assert owed.run_owed(ctx.spool_dir, owed.NoteLog(log.note)) is None

    def test_nothing_owed(self, tmp_path: Path) -> None:
        assert owed.run_owed(str(tmp_path), owed.NoteLog(Logged().note)) is None

    @pytest.mark.parametrize("content", ["{", "[]", '{"id": "c1"}'])
    def test_unreadable_record_is_logged_and_dropped(self, tmp_path: Path,
                                                     content: str) -> None:
        (tmp_path / STAGE_OUT_FILE).write_text(content)
        log = Logged()
        assert -1 == owed.run_owed(str(tmp_path), owed.NoteLog(log.note))
        assert ["error"] == [r[0] for r in log.records]
        assert not (tmp_path / STAGE_OUT_FILE).exists()

    def test_script_gone(self, tmp_path: Path, script: Path) -> None:
        """A script that no longer loads: one error record, the record dropped."""
        ctx = _ctx(tmp_path)
        LuaHooks.load(script).stage_in(ctx)
        script.unlink()
        log = Logged()
        assert -1 == owed.run_owed(ctx.spool_dir, owed.NoteLog(log.note))
        assert [("error", "owed stage_out: scrun.lua does not load")] == [
            r[:2] for r in log.records]
