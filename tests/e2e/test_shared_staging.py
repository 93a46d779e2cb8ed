"""lua/scrun-staging.lua on a shared login node: the second test user makes
the first user's cache or staging directory first, in a shared sticky directory (what
`/tmp/scrun-cache-UID` and `/tmp/scrun-staging-UID` are by default)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import BASE, REPO_ROOT, Env, other_user, traces
from tests.e2e.test_shared_host import _as

pytestmark = pytest.mark.e2e



@pytest.fixture
def shared(conf_dir: Path) -> Iterator[Path]:
    """A sticky world-writable directory standing for /tmp, and the shipped staging
    script with its bases there (the real /tmp ones belong to other test runs)."""
    d = BASE / f"shared-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    os.chmod(d, 0o1777)
    text = (REPO_ROOT / "lua" / "scrun-staging.lua").read_text(encoding="utf-8")
    text = text.replace('"/tmp/scrun-staging-%u"', json.dumps(f"{d}/scrun-staging-%u"))
    text = text.replace('"/tmp/scrun-cache-%u"', json.dumps(f"{d}/scrun-cache-%u"))
    (conf_dir / "scrun.lua").write_text(text, encoding="utf-8")
    yield d
    import shutil
    import subprocess

    subprocess.run(["chmod", "-R", "u+rwX", str(d)], check=False)
    shutil.rmtree(d, ignore_errors=True)


def _run(env: Env, conf: Path, cid: str) -> tuple[int, str]:
    """A container that reads its rootfs: (create's status, its output or create's error)."""
    bundle = env.bundle(["cat", "/etc/passwd"], name=f"bundle-{cid}")
    created = env.create(cid, bundle, conf=conf)
    if created.rc != 0:
        return created.rc, created.stderr()
    assert 0 == env.run("start", cid, conf=conf).returncode
    assert 0 == created.wait_exit()
    assert 0 == env.run("delete", cid, conf=conf).returncode
    return 0, created.stdout()


def _lua_log(env: Env) -> str:
    return "\n".join(str(r.get("msg", "")) for r in env.log_records())


class TestStagingMadeFirst:
    @pytest.mark.case("S-15")
    def test_cache_made_by_another_user(self, user_env: Env, conf_dir: Path,
                                        shared: Path) -> None:
        """scruntest2 makes scruntest's cache directory first (0777): scruntest's
        container does not use it (its rootfs is copied, the log says why) and nothing
        is cached there.  Control: a second user's cache of their own is used."""
        env = user_env
        conf = conf_dir / "slurm.conf"
        cache = shared / f"scrun-cache-{env.user.uid}"
        res = _as(other_user(), ["mkdir", "-m", "777", str(cache)], env.work)
        assert 0 == res.returncode, res.stderr
        assert (0, "root:x:0:0:root:/:/bin/sh\n") == _run(env, conf, "c1")
        assert f"{cache} is not a directory owned by uid {env.user.uid}" in _lua_log(env)
        assert [] == list(cache.iterdir())
        os.rmdir(cache)  # control: the user's own cache is used
        assert (0, "root:x:0:0:root:/:/bin/sh\n") == _run(env, conf, "c2")
        assert 1 == len(list((cache / "entries").iterdir())), _lua_log(env)
        assert [] == traces(env)

    @pytest.mark.case("S-16")
    def test_staging_base_made_by_another_user(self, user_env: Env, conf_dir: Path,
                                               shared: Path) -> None:
        """scruntest2 makes scruntest's staging directory first: create fails (nowhere
        private to stage) with the reason on stderr and in the log, nothing is staged
        there, no job or anchor is left."""
        env = user_env
        conf = conf_dir / "slurm.conf"
        staging = shared / f"scrun-staging-{env.user.uid}"
        res = _as(other_user(), ["mkdir", "-m", "777", str(staging)], env.work)
        assert 0 == res.returncode, res.stderr
        rc, err = _run(env, conf, "s1")
        assert 0 != rc
        why = f"{staging} is not a directory owned by uid {env.user.uid}"
        assert why in err  # the script's error record, then create's failure
        assert "slurm_scrun_stage_in returned -1" in err.splitlines()[-1]
        assert why in _lua_log(env)
        assert [] == list(staging.iterdir())
        assert [] == traces(env, "s1")


class TestHostileImage:
    @pytest.mark.case("S-17")
    def test_directory_name_with_a_newline(self, user_env: Env, conf_dir: Path,
                                           shared: Path) -> None:
        """An image with a top-level directory named "x<newline>dir=.." (which forged a
        second line of the staging script's output, naming the cache entry itself as an
        overlay) runs from a copy of its rootfs, never from overlays of the cache."""
        env = user_env
        conf = conf_dir / "slurm.conf"
        bundle = env.bundle(["sh", "-c", 'for d in /x*; do [ -d "$d" ] && echo found; done'],
                            name="bundle-nl")
        (bundle.path / "rootfs" / "x\ndir=..").mkdir()
        env.chown(bundle.path)
        created = env.create("nl", bundle, conf=conf)
        assert 0 == created.rc, created.stderr()
        staged = Path(str(env.state("nl")["bundle"]))
        config = json.loads((staged / "config.json").read_text())
        assert [] == [m for m in config["mounts"] if m["type"] == "overlay"]
        assert 0 == env.run("start", "nl", conf=conf).returncode
        assert 0 == created.wait_exit()
        assert "found\n" == created.stdout()
        assert 0 == env.run("delete", "nl", conf=conf).returncode
        assert "a top-level directory of the image has a name overlay options cannot " \
               "carry (status 7" in _lua_log(env)
        assert [] == traces(env, "nl")
