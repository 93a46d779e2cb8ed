"""lua/scrun-staging.lua's cached stage-in under docker and podman (root and rootless).

scripts/engines.sh installs this checkout's lua/scrun-staging.lua as the engines'
scrun.lua (the docs' configuration), so these runs use the cache as shipped: a rootfs
that ran before is not copied again, each container gets overlays of the cached copy,
and what it writes stays out of the cache.  The proof that a run copied nothing is in
the cache dir: the same entry (same inode) one use further, and a running container's
staging dir holding a skeleton of mount points instead of a rootfs.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import pytest

from tests.e2e import test_engines as engines
from tests.e2e.conftest import CACHE_BASE, ENGINE_CONF, STATE, TEST_USER, VENV, User, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.engines]

BUSYBOX_TAR = STATE / "engines" / "busybox.tar"


def guarded(eng: engines.Engine) -> Iterator[engines.Engine]:
    """test_engines' guard (a whole-test timeout; no job, anchor, spool dir or staged
    rootfs left behind), counting only what appeared during the test."""
    jobs = engines._our_jobs(eng)
    present = set(engines.leftovers(eng, jobs, wait_s=0))
    inner = cast("Generator[engines.Engine, None, None]", engines._guarded(eng))
    try:
        yield next(inner)
        deadline = time.monotonic() + 30
        while set(engines.leftovers(eng, jobs, wait_s=0)) - present:
            if time.monotonic() > deadline:
                assert [] == sorted(set(engines.leftovers(eng, jobs, wait_s=0)) - present)
            time.sleep(0.2)
    finally:
        inner.close()  # its own check would count what was there before the test


@pytest.fixture(params=["docker", "podman-root", "podman-rootless"])
def engine(request: pytest.FixtureRequest, engines_up: None) -> Iterator[engines.Engine]:
    name, _, who = str(request.param).partition("-")
    yield from guarded(
        engines.Engine(name, User.named(TEST_USER if who == "rootless" else "root")))


engines_up = engines.engines_up


# the eviction test's cache of its own (its CACHE_BASE)
EVICT_BASE = CACHE_BASE.replace("scrun-cache", "scrun-cache-evict")


def cache_dir(eng: engines.Engine, base: str = CACHE_BASE) -> Path:
    """The cache of the engine's user under BASE (a CACHE_BASE setting, with %u)."""
    return Path(base.replace("%u", str(eng.user.uid)))


def entries(eng: engines.Engine, base: str = CACHE_BASE) -> dict[str, int]:
    """Cache entries: key -> uses."""
    found = {}
    directory = cache_dir(eng, base) / "entries"
    if directory.is_dir():
        for entry in directory.iterdir():
            uses = entry / "uses"
            found[entry.name] = int(uses.read_text()) if uses.is_file() else 0
    return found


def tree(path: Path) -> list[tuple[str, int, int, int, int]]:
    """Every entry under path: name, mode, uid, size, mtime (ns)."""
    out = []
    for entry in sorted(path.rglob("*")):
        st = entry.lstat()
        out.append((str(entry.relative_to(path)), st.st_mode, st.st_uid,
                    0 if entry.is_dir() else st.st_size, st.st_mtime_ns))
    return out


class Image:
    """A new image: busybox plus /added (its own content, so its own cache key)."""

    def __init__(self, eng: engines.Engine, extra: str | None = None,
                 mtime: int | None = None) -> None:
        self.eng = eng
        tag = f"scrun-cache-{uuid.uuid4().hex[:8]}"
        self.name = tag if eng.name == "docker" else f"localhost/{tag}"
        self.added = extra or f"image {tag}\n"
        fd, tar_path = tempfile.mkstemp(prefix="scrun-cache-", suffix=".tar", dir="/tmp")
        os.close(fd)
        self.tar = Path(tar_path)
        shutil.copy(BUSYBOX_TAR, self.tar)
        with tarfile.open(self.tar, "a") as tar:
            data = self.added.encode()
            info = tarfile.TarInfo("./added")
            # an mtime of its own as well: the default key, like rsync's quick check, takes
            # a file of the same size and mtime for the same file
            info.size, info.mode = len(data), 0o644
            info.mtime = mtime or 1_700_000_000 + uuid.uuid4().int % 10**8
            tar.addfile(info, io.BytesIO(data))
        self.tar.chmod(0o644)
        res = eng("import", *(["-q"] if eng.name == "podman" else []), str(self.tar), self.name)
        assert 0 == res.returncode, res.stderr

    def remove(self) -> None:
        self.eng("rmi", "-f", self.name)
        self.tar.unlink(missing_ok=True)


@pytest.fixture
def image(engine: engines.Engine) -> Iterator[Image]:
    img = Image(engine)
    yield img
    img.remove()


class TestCache:
    def test_second_run_copies_no_rootfs(self, engine: engines.Engine, image: Image) -> None:
        """The first `run --rm` of an image makes one cache entry; the second uses that
        entry (same inode, one more use) and makes none; a running container's staging
        dir holds empty mount points and overlay mounts of the entry, no rootfs."""
        before = entries(engine)
        res = engine.run("--rm", image.name, "cat", "/added")
        assert (0, image.added) == (res.returncode, res.stdout), res.stderr
        new = set(entries(engine)) - set(before)
        assert 1 == len(new), entries(engine)
        key = new.pop()
        entry = cache_dir(engine) / "entries" / key
        inode = (entry / "rootfs").stat().st_ino
        res = engine.run("--rm", image.name, "cat", "/added")
        assert (0, image.added) == (res.returncode, res.stdout), res.stderr
        after = entries(engine)
        assert (set(before) | {key}, 2, inode, []) == (
            set(after), after[key], (entry / "rootfs").stat().st_ino,
            sorted((cache_dir(engine) / "tmp").iterdir()))

        name = engines._name("cache")
        res = engine.run("-d", "--name", name, image.name, "sh", "-c",
                         "echo up; sleep 60")
        try:
            assert 0 == res.returncode, res.stderr
            wait_until(lambda: "up" in engine.logs(name), "the container")
            cid = engine("inspect", "-f", "{{.Id}}", name).stdout.strip()
            staging = engine.staging / cid
            config = json.loads((staging / "config.json").read_text())
            overlays = [m for m in config["mounts"] if m["type"] == "overlay"]
            skeleton = staging / "rootfs"
            assert (
                3, sorted(p.name for p in (entry / "rootfs").iterdir() if p.is_dir()
                          and not p.is_symlink()),
                {f"lowerdir={entry}/rootfs{m['destination']}" for m in overlays},
                [], str(skeleton),
            ) == (
                entries(engine)[key], sorted(m["destination"][1:] for m in overlays),
                {o for m in overlays for o in m["options"] if o.startswith("lowerdir=")},
                # seen from here, each mount point is empty: no copy of the image under it
                [m["destination"] for m in overlays
                 if any((skeleton / m["destination"][1:]).iterdir())],
                config["root"]["path"],
            )
        finally:
            engine.rm_force(name)

    def test_writes_leave_the_cache_unchanged(self, engine: engines.Engine,
                                              image: Image) -> None:
        """A container that writes, deletes and adds in its rootfs: the cache entry is as
        it was, and the next container of the image sees the image, not the writes."""
        before = entries(engine)
        res = engine.run("--rm", image.name, "true")
        assert 0 == res.returncode, res.stderr
        [key] = set(entries(engine)) - set(before)
        entry = cache_dir(engine) / "entries" / key / "rootfs"
        listing = tree(entry)
        res = engine.run("--rm", image.name, "sh", "-c",
                         "echo written > /etc/written; rm /added; mkdir /newdir; "
                         "echo more >> /etc/passwd; cat /etc/written")
        assert (0, "written\n") == (res.returncode, res.stdout), res.stderr
        assert listing == tree(entry)
        res = engine.run("--rm", image.name, "sh", "-c",
                         "ls /etc/written /newdir 2>&1; cat /added; tail -1 /etc/passwd")
        assert ["ls: /etc/written: No such file or directory",
                "ls: /newdir: No such file or directory", image.added.strip(),
                "nobody:x:65534:65534:nobody:/:/bin/false"] == res.stdout.splitlines(), \
            res.stderr
        assert 3 == entries(engine)[key]

    def test_changed_image_gets_a_new_entry(self, engine: engines.Engine,
                                            image: Image) -> None:
        """A new tag with one more file than the image: a new entry, whose rootfs has it."""
        assert 0 == engine.run("--rm", image.name, "true").returncode
        first = entries(engine)
        changed = Image(engine, extra=image.added + "one more line\n")
        try:
            res = engine.run("--rm", changed.name, "cat", "/added")
            assert (0, changed.added) == (res.returncode, res.stdout), res.stderr
            new = set(entries(engine)) - set(first)
            assert 1 == len(new)
            added = cache_dir(engine) / "entries" / new.pop() / "rootfs" / "added"
            assert changed.added == added.read_text()
        finally:
            changed.remove()

    def test_concurrent_runs_share_one_entry(self, engine: engines.Engine,
                                             image: Image) -> None:
        """Four `run --rm` of a new image at once: all succeed, one entry with four uses
        (a copy that lost the race to populate it is discarded)."""
        before = entries(engine)
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(
                lambda n: engine.run("--rm", image.name, "sh", "-c", f"cat /added; echo {n}"),
                range(4)))
        assert [(0, f"{image.added}{n}\n") for n in range(4)] == [
            (r.returncode, r.stdout) for r in results], [r.stderr for r in results]
        new = {k: v for k, v in entries(engine).items() if k not in before}
        assert (1, [4], []) == (len(new), list(new.values()),
                                sorted((cache_dir(engine) / "tmp").iterdir()))


@pytest.fixture(params=["docker", "podman-root"])
def root_engine(request: pytest.FixtureRequest, engines_up: None) -> Iterator[engines.Engine]:
    """The engines whose containers all run as root: one cache every caller shares."""
    name = str(request.param).partition("-")[0]
    yield from guarded(engines.Engine(name, User.named("root")))


class TestSharedCache:
    def test_look_alike_image_is_not_served(self, root_engine: engines.Engine) -> None:
        """A hostile image author's look-alike: the same files, /added with the same size
        and mtime but other bytes, run first.  The other image's container sees its own
        bytes (the shared cache's default key covers content), in an entry of its own."""
        mtime = 1_700_000_000 + uuid.uuid4().int % 10**8
        planted = Image(root_engine, extra="planted\n", mtime=mtime)
        victim = Image(root_engine, extra="genuine\n", mtime=mtime)
        try:
            before = entries(root_engine)
            for img in (planted, victim):
                res = root_engine.run("--rm", img.name, "cat", "/added")
                assert (0, img.added) == (res.returncode, res.stdout), res.stderr
            assert 2 == len(set(entries(root_engine)) - set(before))
        finally:
            planted.remove()
            victim.remove()


@pytest.fixture(params=["root", "rootless"])
def small_cache_podman(request: pytest.FixtureRequest, engines_up: None,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[
                           tuple[engines.Engine, Path]]:
    """podman with a runtime of its own: the shipped script with a cache of its own
    (EVICT_BASE) bounded to 3 MB, one busybox rootfs."""
    eng = engines.Engine("podman", User.named(TEST_USER if request.param == "rootless"
                                              else "root"))
    conf = Path(tempfile.mkdtemp(prefix="scrun-cache-conf-", dir="/tmp"))
    conf.chmod(0o755)
    for name in ("slurm.conf", "oci.conf"):
        (conf / name).symlink_to(ENGINE_CONF / name)
    script = (ENGINE_CONF / "scrun.lua").read_text()
    for old, new in (('local CACHE_MAX_MB = 4096', 'local CACHE_MAX_MB = 3'),
                     (f'"{CACHE_BASE}"', f'"{EVICT_BASE}"')):
        assert old in script
        script = script.replace(old, new)
    (conf / "scrun.lua").write_text(script)
    wrapper = conf / "scrun-py-slurm"
    wrapper.write_text(f'#!/bin/sh\nexec {VENV}/bin/scrun-py -f {conf}/slurm.conf "$@"\n')
    for path in (conf / "scrun.lua", wrapper):
        path.chmod(0o755)
    try:
        yield from ((eng, wrapper) for eng in guarded(eng))
    finally:
        shutil.rmtree(conf, ignore_errors=True)
        subprocess.run(["rm", "-rf", str(cache_dir(eng, EVICT_BASE))],
                       check=False)


def test_eviction_under_a_small_bound(small_cache_podman: tuple[engines.Engine, Path]) -> None:
    """With room for one entry, each new image evicts the least recently used one once no
    container uses it; an image that ran again is staged from a new copy."""
    eng, wrapper = small_cache_podman
    base = EVICT_BASE
    a, b = Image(eng), Image(eng)
    try:
        def run(img: Image) -> None:
            res = eng("--runtime", str(wrapper), *eng.run_args(), "--rm", img.name, "cat",
                      "/added")
            assert (0, img.added) == (res.returncode, res.stdout), res.stderr
        run(a)
        [key_a] = entries(eng, base)
        run(b)
        [key_b] = entries(eng, base)
        run(a)
        assert ([key_a], 1, key_a != key_b) == (list(entries(eng, base)),
                                                entries(eng, base)[key_a], True)
        assert [] == sorted((cache_dir(eng, base) / "trash").iterdir())
    finally:
        a.remove()
        b.remove()
