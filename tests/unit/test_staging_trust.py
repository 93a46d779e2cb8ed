"""lua/scrun-staging.lua on a shared host: the cache's key where every caller
shares it, image directory names overlay options cannot carry, and staging or cache
directories another user made first."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from scrun_py.base.errors import HookError
from tests.unit.test_staging_cache import (  # noqa: F401 - the stage fixture
    Stage,
    needs_overlay,
    same_size_and_mtime,
    stage,
)

SHARED_UID = 0  # root engines run every caller's jobs as root: one cache for all
OWN_UID = 4242  # a user's own cache (rootless podman)


@needs_overlay
class TestSharedCacheKey:
    @pytest.mark.parametrize(("user_id", "entries"), [(SHARED_UID, 2), (OWN_UID, 1)])
    def test_default_key(self, stage: Stage, user_id: int, entries: int) -> None:  # noqa: F811
        """With the default CACHE_KEY ("auto"), a file changed without changing its size
        or mtime is not served from the entry of the first image where the cache is
        shared (jobs of uid 0): the second container sees its own bytes.  A user's own
        cache keeps the quick metadata key."""
        look_alike = same_size_and_mtime(stage, "look-alike")
        cache = stage.tmp / f"cache-{user_id}"
        first, _ = stage.stage_in("a", stage.image, user_id=user_id)
        second, _ = stage.stage_in("b", look_alike, user_id=user_id)
        assert entries == len(stage.entries(cache))
        entry = Path((Path(second.bundle) / "cache-entry").read_text().strip())
        served = (entry / "rootfs" / "usr" / "lib" / "libx.so").read_text()
        assert ("y" if user_id == SHARED_UID else "x") * 5000 == served
        for ctx in (first, second):
            assert 0 == stage.stage_out(ctx)[0]


def _image_with_dir(stage: Stage, name: str) -> Path:  # noqa: F811
    rootfs = stage.copy_image("odd")
    (rootfs / name).mkdir()
    return rootfs


@needs_overlay
class TestDirectoryNames:
    @pytest.mark.parametrize("name", ["x\ndir=..", "a,b", "a:b",
                                      "sp ace"])
    def test_unsafe_name_is_copied(self, stage: Stage, name: str) -> None:  # noqa: F811
        """A top-level directory whose name overlay options cannot carry (a newline would
        also forge another "dir=" line of the script's output, here "..", the cache
        entry's own directory) is never an overlay: the rootfs is copied instead."""
        ctx, log = stage.stage_in("c1", _image_with_dir(stage, name))
        config = json.loads((Path(ctx.bundle) / "config.json").read_text())
        assert [] == [m for m in config["mounts"] if m["type"] == "overlay"]
        assert any("a top-level directory of the image has a name overlay options cannot "
                   "carry (status 7" in m for m in log), log
        assert (Path(ctx.root_path) / name).is_dir()
        assert not (Path(ctx.bundle) / "cache-entry").exists()
        assert 0 == stage.stage_out(ctx)[0]


def _theirs(path: Path, mode: int = 0o755) -> None:
    path.mkdir(mode=mode)
    path.chmod(mode)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)


class TestDirectoriesMadeFirst:
    @pytest.mark.parametrize("foreign", ["other-user", "world-writable"])
    @needs_overlay
    def test_cache_made_by_another_user(self, stage: Stage, foreign: str) -> None:  # noqa: F811
        """A cache directory that is not the user's own (another user made it first in
        /tmp), or that others can write, is not used: the rootfs is copied (a private
        fallback), with the reason in the log."""
        if foreign == "other-user" and os.geteuid() != 0:
            pytest.skip("giving a directory to another uid needs root")
        if foreign == "other-user":
            _theirs(stage.cache, 0o777)
        else:
            stage.cache.mkdir(mode=0o777)
            stage.cache.chmod(0o777)
        ctx, log = stage.stage_in("c1")
        why = ("is not a directory owned by uid" if foreign == "other-user"
               else "is writable by other users")
        assert any(str(stage.cache) in m and why in m and "copying the rootfs" in m
                   for m in log), log
        assert [] == stage.entries()
        assert not (Path(ctx.bundle) / "cache-entry").exists()
        assert (Path(ctx.root_path) / "etc" / "motd").read_text() == "hi\n"
        assert 0 == stage.stage_out(ctx)[0]

    @pytest.mark.parametrize("cache", ["true", "false"])
    def test_staging_base_made_by_another_user(self, stage: Stage, cache: str) -> None:  # noqa: F811
        """A staging base another user made first is refused with a clear error (with or
        without the cache): nothing is staged into it."""
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another uid needs root")
        if not shutil.which("rsync"):
            pytest.skip("rsync is not installed")
        stage.write_script(CACHE=cache)
        _theirs(stage.staging_base, 0o777)
        with pytest.raises(HookError):
            stage.stage_in("c1")
        assert [] == sorted(stage.staging_base.iterdir())
