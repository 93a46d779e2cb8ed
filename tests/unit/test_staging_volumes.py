"""lua/scrun-staging.lua's volumes, driven through LuaHooks with real commands and
containers under rootless crun: a bind mount from under the site's shared paths
([staging] shared_paths of scrun-py.toml) stays a bind mount of the user's directory; any
other is copied in and, when writable, copied back after the container ends; with the
cache and without it."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_staging_cache import Stage, needs_crun, needs_overlay


def bind(source: Path | str, destination: str, *options: str) -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": str(source),
            "options": ["rbind", *options]}


@pytest.fixture(params=["cache", "copy"])
def stage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stage]:
    """The staging script with the cache and without (CACHE = false), the site's shared
    paths being tmp/shared (through a symlink, as /home often is)."""
    s = Stage(tmp_path)
    if request.param == "copy":
        s.write_script(CACHE="false")
    (tmp_path / "shared-fs" / "proj").mkdir(parents=True)
    (tmp_path / "shared").symlink_to(tmp_path / "shared-fs")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "input").write_text("outside\n")
    s.site = {"shared_paths": [str(tmp_path / "shared")]}
    yield s
    subprocess.run(["chmod", "-R", "u+rwX", str(tmp_path)], check=False)


def staged_mounts(ctx: Any) -> list[tuple[str, str]]:
    config = json.loads((Path(ctx.bundle) / "config.json").read_text())
    return [(m["destination"], m["source"]) for m in config["mounts"] if m["type"] == "bind"]


@needs_overlay
@needs_crun
class TestSharedPaths:
    def test_a_shared_volume_is_the_users_directory(self, stage: Stage) -> None:
        """A volume under a shared path stays a bind mount of its resolved path: what the
        container writes is in the user's directory when it ends, before stage_out, and
        nothing of it was copied into the staged rootfs."""
        proj = stage.tmp / "shared" / "proj"
        (proj / "in.txt").write_text("input\n")
        ctx, log = stage.stage_in("s1", cmd="cat /work/in.txt; echo result > /work/out.txt",
                                  mounts=[bind(proj, "/work")])
        resolved = str(stage.tmp / "shared-fs" / "proj")
        assert ("/work", resolved) in staged_mounts(ctx), log
        assert not (Path(ctx.root_path) / "work" / "in.txt").exists()
        res = stage.run(ctx)
        assert (0, "input\n", "result\n") == (
            res.returncode, res.stdout, (proj / "out.txt").read_text()), res.stderr
        rc, log = stage.stage_out(ctx)
        assert (0, []) == (rc, [m for m in log if "volumes back" in m])

    def test_read_only_stays_read_only(self, stage: Stage) -> None:
        proj = stage.tmp / "shared" / "proj"
        ctx, _ = stage.stage_in("s2", cmd="echo x > /work/new || echo refused",
                                mounts=[bind(proj, "/work", "ro")])
        res = stage.run(ctx)
        assert (0, "refused\n", False) == (
            res.returncode, res.stdout.splitlines()[-1] + "\n", (proj / "new").exists())
        assert 0 == stage.stage_out(ctx)[0]

    @pytest.mark.parametrize("how", ["symlink", "dotdot"])
    def test_a_source_leaving_the_shared_paths_is_copied(self, stage: Stage, how: str) -> None:
        """A source under a shared path that leads out of it (a symlink, "..") is not
        shared: it is copied, as any other source."""
        if how == "symlink":
            source: Path | str = stage.tmp / "shared" / "proj" / "escape"
            Path(source).symlink_to(stage.tmp / "outside")
        else:
            source = f"{stage.tmp}/shared/proj/../../outside"
        ctx, log = stage.stage_in("s3", cmd="cat /work/input", mounts=[bind(source, "/work")])
        assert "/work" not in dict(staged_mounts(ctx)), log
        res = stage.run(ctx)
        assert (0, "outside\n") == (res.returncode, res.stdout), res.stderr
        assert 0 == stage.stage_out(ctx)[0]


@needs_overlay
@needs_crun
class TestCopiedVolumes:
    def test_writes_to_a_copied_volume_are_copied_back(self, stage: Stage) -> None:
        """A writable volume outside the shared paths is copied in; its new and changed
        files reach the source at stage_out (one log line says how many), a read-only
        one and the engine's own files (/etc/hosts) are not copied back."""
        out = stage.tmp / "outside"
        ro = stage.tmp / "ro"
        ro.mkdir()
        ctx, _ = stage.stage_in(
            "c1", cmd="echo new > /work/new; echo changed > /work/input; mkdir /work/d; "
            "echo deep > /work/d/f; echo x > /ro/x; echo h > /etc/hosts; true",
            mounts=[bind(out, "/work"), bind(ro, "/ro", "ro")])
        res = stage.run(ctx)
        # the container wrote into its copy: the source is unchanged until stage_out
        assert (0, False) == (res.returncode, (out / "new").exists()), res.stderr
        rc, log = stage.stage_out(ctx)
        assert (0, "new\n", "changed\n", "deep\n", [], "127.0.0.1 localhost\n") == (
            rc, (out / "new").read_text(), (out / "input").read_text(),
            (out / "d" / "f").read_text(), sorted(p.name for p in ro.iterdir()),
            (stage.tmp / "hosts").read_text()), log
        assert ["c1: copied 3 new or changed files of its volumes back to their sources"] == [
            m for m in log if "volumes back" in m]
        assert not Path(ctx.bundle).exists()

    def test_a_reader_copies_nothing_back(self, stage: Stage) -> None:
        before = sorted(os.stat(p).st_mtime_ns for p in (stage.tmp / "outside").iterdir())
        ctx, _ = stage.stage_in("c2", cmd="cat /work/input",
                                mounts=[bind(stage.tmp / "outside", "/work")])
        res = stage.run(ctx)
        rc, log = stage.stage_out(ctx)
        assert (0, "outside\n", 0, [], before) == (
            res.returncode, res.stdout, rc, [m for m in log if "volumes back" in m],
            sorted(os.stat(p).st_mtime_ns for p in (stage.tmp / "outside").iterdir()))

    def test_a_file_volume(self, stage: Stage) -> None:
        note = stage.tmp / "outside" / "note"
        note.write_text("one\n")
        ctx, _ = stage.stage_in("c3", cmd="cat /note; echo two >> /note",
                                mounts=[bind(note, "/note")])
        res = stage.run(ctx)
        rc, _ = stage.stage_out(ctx)
        assert (0, "one\n", 0, "one\ntwo\n") == (res.returncode, res.stdout, rc,
                                                 note.read_text()), res.stderr


def test_staging_settings_come_from_the_site_file(tmp_path: Path) -> None:
    """[staging] base of scrun-py.toml takes the place of the script's STAGING_BASE."""
    s = Stage(tmp_path)
    s.write_script(CACHE="false")
    s.site = {"base": f"{tmp_path}/elsewhere-%u"}
    ctx, log = s.stage_in("b1")
    assert f"{tmp_path}/elsewhere-{os.getuid()}/b1" == ctx.bundle, log
    assert 0 == s.stage_out(ctx)[0]
