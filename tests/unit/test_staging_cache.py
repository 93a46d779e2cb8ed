"""lua/scrun-staging.lua's cached stage-in, driven through LuaHooks with real commands:
cache entries, overlays (mounted by rootless crun where it is installed), copy back,
concurrency, eviction and the fallback to the copy."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from scrun_py.hooks.context import HookContext, HookJob, HookPaths
from scrun_py.hooks.lua import LuaHooks

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "lua" / "scrun-staging.lua"
BUSYBOX = shutil.which("busybox")

# A squeue that knows every job as RUNNING, or (GONE) job 42 no more ("Invalid job id",
# as Slurm says).
SQUEUE_LIVE = "#!/bin/sh\necho RUNNING\n"
SQUEUE_GONE = ('#!/bin/sh\n[ "$3" = 42 ] || { echo RUNNING; exit 0; }\n'
               "echo 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")

DRIVER = """
import json, sys
from pathlib import Path
from scrun_py.hooks.context import HookContext, HookJob, HookPaths
from scrun_py.hooks.lua import LuaHooks
from structlog.testing import capture_logs
args = json.loads(sys.argv[1])
ctx = HookContext(args["id"], HookPaths(*args["paths"]),
                  HookJob(*args["job"], lambda cmd: ["/bin/sh", "-c", cmd]))
with capture_logs() as logs:
    LuaHooks.load(Path(args["script"])).stage_in(ctx)
sys.stderr.write("".join(str(e["event"]) + "\\n" for e in logs))
print(json.dumps({"bundle": ctx.bundle, "root_path": ctx.root_path}))
"""


def _tree(path: Path) -> list[tuple[str, int, int, int, float, str]]:
    """Every entry under path: name, mode, uid, size, mtime, link target."""
    out = []
    for entry in sorted(path.rglob("*")):
        st = entry.lstat()
        out.append((str(entry.relative_to(path)), st.st_mode, st.st_uid,
                    st.st_size if not entry.is_dir() else 0, st.st_mtime,
                    os.readlink(entry) if entry.is_symlink() else ""))
    return out


@dataclass
class Stage:
    """The staging script with its bases under tmp, an image, and a fake squeue."""

    tmp: Path
    settings: dict[str, str] = field(default_factory=dict)
    site: dict[str, Any] = field(default_factory=dict)  # [staging] of scrun-py.toml

    def __post_init__(self) -> None:
        self.bin = self.tmp / "bin"
        self.bin.mkdir()
        self.squeue(SQUEUE_LIVE)
        self.write_script()
        self.image = self.tmp / "image"
        self.make_rootfs(self.image)

    @property
    def staging_base(self) -> Path:
        return self.tmp / f"staging-{os.getuid()}"

    @property
    def cache(self) -> Path:
        return self.tmp / f"cache-{os.getuid()}"

    def write_script(self, **settings: str) -> None:
        self.settings.update(settings)
        text = SCRIPT.read_text(encoding="utf-8")
        text = text.replace('"/tmp/scrun-staging-%u"', json.dumps(f"{self.tmp}/staging-%u"))
        text = text.replace('"/tmp/scrun-cache-%u"', json.dumps(f"{self.tmp}/cache-%u"))
        for name, value in self.settings.items():
            old = next(line for line in text.splitlines() if line.startswith(f"local {name} = "))
            text = text.replace(old, f"local {name} = {value}")
        self.script = self.tmp / "scrun.lua"
        self.script.write_text(text, encoding="utf-8")

    def squeue(self, text: str) -> None:
        path = self.bin / "squeue"
        path.write_text(text)
        path.chmod(0o755)

    @staticmethod
    def make_rootfs(root: Path) -> None:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "usr/lib"):
            (root / d).mkdir(parents=True)
        (root / "lib").symlink_to("usr/lib")
        (root / "etc" / "motd").write_text("hi\n")
        (root / "etc" / "hosts").write_text("engine-made\n")
        (root / ".dockerenv").write_text("")
        (root / "usr" / "lib" / "libx.so").write_text("x" * 5000)
        if BUSYBOX:
            shutil.copy(BUSYBOX, root / "bin" / "busybox")
            for applet in ("sh", "cat", "ls", "echo", "rm", "mkdir"):
                (root / "bin" / applet).symlink_to("busybox")

    def copy_image(self, name: str) -> Path:
        """A second rootfs with the same content (cp -a keeps the mtimes)."""
        dest = self.tmp / name
        subprocess.run(["cp", "-a", str(self.image), str(dest)], check=True)
        return dest

    def bundle(self, cid: str, rootfs: Path, cmd: str = "true", readonly: bool = False,
               mounts: Sequence[Mapping[str, Any]] = ()) -> Path:
        bundle = self.tmp / f"bundle-{cid}"
        bundle.mkdir()
        (self.tmp / "data").mkdir(exist_ok=True)
        (self.tmp / "data" / "input").write_text("in\n")
        (self.tmp / "hosts").write_text("127.0.0.1 localhost\n")
        config = {
            "ociVersion": "1.0.0",
            "process": {"terminal": False, "user": {"uid": 0, "gid": 0},
                        "args": ["/bin/sh", "-c", cmd], "env": ["PATH=/bin"], "cwd": "/",
                        "noNewPrivileges": True},
            "root": {"path": str(rootfs), "readonly": readonly},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                 "options": ["nosuid", "mode=755"]},
                {"destination": "/etc/hosts", "type": "bind", "source": str(self.tmp / "hosts"),
                 "options": ["rbind", "ro"]},
                {"destination": "/data", "type": "bind", "source": str(self.tmp / "data"),
                 "options": ["rbind"]},
                *mounts,
            ],
            "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"},
                                     {"type": "uts"}, {"type": "network"}]},
        }
        (bundle / "config.json").write_text(json.dumps(config))
        return bundle

    def ctx(self, cid: str, bundle: Path, rootfs: Path, tasks: str = "1",
            job_id: int = 42, user_id: int | None = None) -> HookContext:
        return HookContext(
            cid,
            HookPaths(bundle=str(bundle), orig_bundle=str(bundle), root_path=str(rootfs),
                      orig_root_path=str(rootfs), spool_dir=str(self.tmp / "spool") + "/",
                      config_file=str(bundle / "config.json")),
            HookJob(job_id=job_id, user_id=os.getuid() if user_id is None else user_id,
                    group_id=os.getgid(),
                    env={"SLURM_TASKS_PER_NODE": tasks,
                         "PATH": f"{self.bin}:{os.environ['PATH']}"},
                    remote_argv=lambda cmd: ["/bin/sh", "-c", cmd]))

    def stage_in(self, cid: str, rootfs: Path | None = None, cmd: str = "true",
                 **kwargs: Any) -> tuple[HookContext, list[str]]:
        rootfs = rootfs or self.image
        readonly = kwargs.pop("readonly", False)
        mounts = kwargs.pop("mounts", ())
        ctx = self.ctx(cid, self.bundle(cid, rootfs, cmd, readonly, mounts), rootfs, **kwargs)
        with capture_logs() as logs:
            LuaHooks.load(self.script, staging=self.site).stage_in(ctx)
        return ctx, lua_messages(logs)

    def stage_out(self, ctx: HookContext) -> tuple[int | None, list[str]]:
        with capture_logs() as logs:
            rc = LuaHooks.load(self.script, staging=self.site).stage_out(ctx)
        return rc, lua_messages(logs)

    def entries(self, cache: Path | None = None) -> list[Path]:
        entries = (cache or self.cache) / "entries"
        return sorted(entries.iterdir()) if entries.is_dir() else []

    def run(self, ctx: HookContext) -> subprocess.CompletedProcess[str]:
        """The staged bundle under rootless crun, as oci.conf runs it on a node."""
        name = Path(ctx.bundle).name
        return subprocess.run(["crun", "--rootless=true", f"--root={self.tmp}/oci", "run",
                               "--bundle", ctx.bundle, name],
                              capture_output=True, text=True, timeout=60, check=False)


def lua_messages(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(e["event"]).removeprefix("lua: scrun-staging: ") for e in logs
            if str(e["event"]).startswith("lua: ")]


def overlay_usable() -> bool:
    probe = Path("/tmp") / f"ovl-probe-{os.getpid()}"
    for d in ("l", "u", "w", "m"):
        (probe / d).mkdir(parents=True, exist_ok=True)
    ns = ["unshare", "-m"] if os.getuid() == 0 else ["unshare", "-Urm"]
    try:
        res = subprocess.run([*ns, "mount", "-t", "overlay", "overlay", "-o",
                              f"userxattr,lowerdir={probe}/l,upperdir={probe}/u,"
                              f"workdir={probe}/w", f"{probe}/m"],
                             capture_output=True, check=False, timeout=30)
    except FileNotFoundError:
        return False
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(probe)], check=False)
        shutil.rmtree(probe, ignore_errors=True)
    return res.returncode == 0


# scripts/cluster.sh up installs rsync, crun and busybox-static (flock is util-linux's), and
# root may mount an overlay: on a CI machine these skips fail (tests/conftest.py)
needs_overlay = pytest.mark.skipif(not (shutil.which("rsync") and shutil.which("flock")
                                        and overlay_usable()),
                                   reason="rsync, flock or an overlay mount is not available")
needs_crun = pytest.mark.skipif(not (shutil.which("crun") and BUSYBOX),
                                reason="crun or busybox is not installed")


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    s = Stage(tmp_path)
    yield s
    subprocess.run(["chmod", "-R", "u+rwX", str(tmp_path)], check=False)


def same_size_and_mtime(stage: Stage, name: str) -> Path:
    """A copy of the image whose library has other bytes, same size, same mtime (what a
    reproducible build that changed one byte looks like, or a planted look-alike)."""
    rootfs = stage.copy_image(name)
    lib = rootfs / "usr" / "lib" / "libx.so"
    st = lib.stat()
    lib.write_text("y" * 5000)
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    return rootfs


@needs_overlay
class TestCache:
    def test_second_container_copies_no_rootfs(self, stage: Stage) -> None:
        """The first stage_in copies the rootfs into the cache; the second finds it there
        and copies nothing (same entry, same inode); neither copies a rootfs of its own."""
        first, log1 = stage.stage_in("c1")
        [entry] = stage.entries()
        inode = (entry / "rootfs").stat().st_ino
        second, log2 = stage.stage_in("c2", stage.copy_image("image2"))
        staged = json.loads((Path(second.bundle) / "config.json").read_text())
        overlays = [m for m in staged["mounts"] if m["type"] == "overlay"]
        assert (
            [entry], inode, "2", [],
            [f"c1: copied {stage.image} to the cache as {entry} (miss)"],
            [f"c2: the rootfs of {stage.tmp / 'image2'} is cached as {entry}: no copy"],
            ["/bin", "/dev", "/etc", "/proc", "/sys", "/tmp", "/usr"],
            staged["mounts"][:len(overlays)],
            ["userxattr", f"lowerdir={entry}/rootfs/etc",
             f"upperdir={second.bundle}/upper/etc", f"workdir={second.bundle}/work/etc"],
            "usr/lib",
            [".dockerenv", "bin", "data", "dev", "etc", "lib", "proc", "sys", "tmp", "usr"],
        ) == (
            stage.entries(), (entry / "rootfs").stat().st_ino,
            (entry / "uses").read_text().strip(), sorted((stage.cache / "tmp").iterdir()),
            [m for m in log1 if "cache" in m], [m for m in log2 if "cache" in m],
            [m["destination"] for m in overlays], overlays,
            next(m["options"] for m in overlays if m["destination"] == "/etc"),
            os.readlink(Path(second.root_path) / "lib"),
            sorted(p.name for p in Path(second.root_path).iterdir()),
        )
        for ctx in (first, second):
            rc, log = stage.stage_out(ctx)
            assert (0, [f"{ctx.container_id}: the container changed nothing in its rootfs: "
                        "no copy back"]) == (rc, [m for m in log if "back" in m])
        assert ([], []) == (sorted(stage.staging_base.iterdir()),
                            sorted((entry / "users").iterdir()))

    def test_bind_mount_copies_go_to_the_upper(self, stage: Stage) -> None:
        """Bind-mount sources are copied through the overlay: into the upper, with the
        image's directory modes; the cache entry keeps the image's file."""
        ctx, _ = stage.stage_in("c1")
        [entry] = stage.entries()
        upper = Path(ctx.bundle) / "upper"
        assert (
            "127.0.0.1 localhost\n", "in\n", "engine-made\n",
            (stage.image / "etc").stat().st_mode, ["/.dockerenv", "/run/.containerenv",
                                                    "/proc", "/dev", "/etc/hosts", "/data"],
        ) == (
            (upper / "etc" / "hosts").read_text(), (Path(ctx.root_path) / "data" / "input")
            .read_text(), (entry / "rootfs" / "etc" / "hosts").read_text(),
            (upper / "etc").stat().st_mode,
            (Path(ctx.bundle) / "rootfs-excludes").read_text().split(),
        )
        assert 0 == stage.stage_out(ctx)[0]

    def test_key_leaves_out_what_the_engine_makes(self, stage: Stage) -> None:
        """Mount destinations (/etc/hosts, /dev, /proc) and /.dockerenv are made per
        container by the engine: a rootfs that differs only there has the same key."""
        other = stage.copy_image("image2")
        (other / "etc" / "hosts").write_text("another engine-made file\n")
        (other / ".dockerenv").touch()
        (other / "dev" / "console").write_text("")
        os.utime(other / "etc", (1, 1))  # directory mtimes are left out
        a, _ = stage.stage_in("c1")
        b, log = stage.stage_in("c2", other)
        assert 1 == len(stage.entries()), log
        for ctx in (a, b):
            assert 0 == stage.stage_out(ctx)[0]

    def test_changed_image_gets_a_new_entry(self, stage: Stage) -> None:
        """One more file, a changed mode or a changed mtime: a new key."""
        def change(n: int, r: Path) -> None:
            if n == 1:
                (r / "etc" / "added").write_text("new\n")
            elif n == 2:
                (r / "etc" / "motd").chmod(0o600)
            elif n == 3:
                os.utime(r / "usr" / "lib" / "libx.so", (5, 5))
        keys = []
        for n in range(4):
            rootfs = stage.copy_image(f"image{n}")
            change(n, rootfs)
            ctx, _ = stage.stage_in(f"c{n}", rootfs)
            keys.append(Path(ctx.bundle, "cache-entry").read_text().strip())
            assert 0 == stage.stage_out(ctx)[0]
        assert 4 == len(set(keys)) == len(stage.entries())

    def test_content_key(self, stage: Stage) -> None:
        """CACHE_KEY = "content": same size and mtime but other bytes is another entry
        ("metadata" takes them for the same, as rsync's quick check does)."""
        for setting, expected in (('"metadata"', 1), ('"content"', 2)):
            stage.write_script(CACHE_KEY=setting)
            shutil.rmtree(stage.cache, ignore_errors=True)
            variant = same_size_and_mtime(stage, f"v{setting[1:-1]}")
            for cid, rootfs in (("a", stage.image), ("b", variant)):
                ctx, _ = stage.stage_in(f"{cid}{expected}", rootfs)
                assert 0 == stage.stage_out(ctx)[0]
            assert expected == len(stage.entries()), setting

    def test_content_key_is_remembered(self, stage: Stage) -> None:
        """CACHE_KEY = "content": the key of a rootfs whose files kept their inodes and
        change times is read back, not computed again; a file rewritten in place with its
        size and mtime kept has a new change time: its bytes are read, another entry."""
        stage.write_script(CACHE_KEY='"content"')
        known = stage.cache / "known"
        keys = []
        for cid in ("a", "b"):
            ctx, _ = stage.stage_in(cid)
            keys.append(Path(ctx.bundle, "cache-entry").read_text().strip())
            assert 0 == stage.stage_out(ctx)[0]
        assert (1, 1) == (len(set(keys)), len(list(known.iterdir())))
        lib = stage.image / "usr" / "lib" / "libx.so"
        st = lib.stat()
        lib.write_text("y" * 5000)
        os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
        ctx, _ = stage.stage_in("c")
        entry = Path(ctx.bundle, "cache-entry").read_text().strip()
        assert (2, 2, "y" * 5000) == (
            len(stage.entries()), len(list(known.iterdir())),
            (Path(entry) / "rootfs" / "usr" / "lib" / "libx.so").read_text())
        assert 0 == stage.stage_out(ctx)[0]

    def test_new_listing_is_copied_while_read(self, stage: Stage) -> None:
        """CACHE_KEY = "content": a rootfs whose listing no entry was made from is copied
        into the cache while it is read for its key, and the entry is that copy; another
        rootfs of that listing (new inodes) is only read: it finds the entry."""
        stage.write_script(CACHE_KEY='"content"')
        ctx, first = stage.stage_in("a")
        entry = Path(Path(ctx.bundle, "cache-entry").read_text().strip())
        assert 0 == stage.stage_out(ctx)[0]
        ctx, second = stage.stage_in("b", stage.copy_image("twin"))
        assert 0 == stage.stage_out(ctx)[0]
        while_read = "the rootfs was copied while it was read for its key"
        assert (
            [entry], "x" * 5000, [], [f"a: {while_read}"], [],
            [f"b: the rootfs of {stage.tmp / 'twin'} is cached as {entry}: no copy"],
        ) == (
            stage.entries(), (entry / "rootfs" / "usr" / "lib" / "libx.so").read_text(),
            sorted((stage.cache / "tmp").iterdir()), [m for m in first if "while" in m],
            [m for m in second if "while" in m or "dropped" in m],
            [m for m in second if "cache" in m],
        ), (first, second)

    def test_several_tasks_use_the_cache_with_uppers_of_their_own(self, stage: Stage) -> None:
        """A job of several tasks shares one config.json: the overlays' uppers are in the
        skeleton's .scrun-uppers, which each task's runtime first mounts as a tmpfs copy
        of them (tmpcopyup) and hides afterwards; nothing of it is copied back."""
        ctx, log = stage.stage_in("c1", tasks="1(x3)")
        [entry] = stage.entries()
        mounts = json.loads((Path(ctx.bundle) / "config.json").read_text())["mounts"]
        uppers = f"{ctx.root_path}/.scrun-uppers"
        overlays = [m for m in mounts if m["type"] == "overlay"]
        assert (
            {"destination": "/.scrun-uppers", "type": "tmpfs", "source": "tmpfs",
             "options": ["tmpcopyup", "nosuid", "nodev", "mode=700"]},
            ["userxattr", f"lowerdir={entry}/rootfs/etc", f"upperdir={uppers}/upper/etc",
             f"workdir={uppers}/work/etc"],
            {"destination": "/.scrun-uppers", "type": "tmpfs", "source": "tmpfs",
             "options": ["ro", "nosuid", "nodev", "noexec", "mode=000", "size=4k"]},
            "127.0.0.1 localhost\n", (stage.image / "etc").stat().st_mode, True,
            "c1: several tasks (SLURM_TASKS_PER_NODE=1(x3)): each task's uppers are a tmpfs "
            "of its own: its writes to the image's directories stay on its node and do not "
            "come back",
        ) == (
            mounts[0], next(m["options"] for m in overlays if m["destination"] == "/etc"),
            mounts[1 + len(overlays)], (Path(uppers) / "upper" / "etc" / "hosts").read_text(),
            (Path(uppers) / "upper" / "etc").stat().st_mode,
            "/.scrun-uppers" in (Path(ctx.bundle) / "rootfs-excludes").read_text().split(),
            next(m for m in log if "several tasks" in m),
        ), log
        rc, log = stage.stage_out(ctx)
        assert (0, ["c1: the container changed nothing in its rootfs: no copy back"]) == (
            rc, [m for m in log if "back" in m])

    def test_image_with_the_uppers_name_is_copied(self, stage: Stage) -> None:
        """An image with a top-level .scrun-uppers of its own: several tasks copy."""
        (stage.image / ".scrun-uppers").mkdir()
        ctx, log = stage.stage_in("c1", tasks="2")
        assert [] == [m for m in json.loads((Path(ctx.bundle) / "config.json").read_text())[
            "mounts"] if m["type"] == "overlay"]
        assert any("the image has a top-level .scrun-uppers" in m for m in log), log
        assert 0 == stage.stage_out(ctx)[0]

    def test_several_tasks_copy_without_task_uppers(self, stage: Stage) -> None:
        """TASK_UPPERS = false: a job of several tasks gets the copy, no overlays."""
        stage.write_script(TASK_UPPERS="false")
        ctx, log = stage.stage_in("c1", tasks="1(x3)")
        assert (
            [], "hi\n", [],
            "c1: not one task (SLURM_TASKS_PER_NODE=1(x3)) and TASK_UPPERS is false: copying "
            "the rootfs",
        ) == (
            stage.entries(), (Path(ctx.root_path) / "etc" / "motd").read_text(),
            [m for m in json.loads((Path(ctx.bundle) / "config.json").read_text())["mounts"]
             if m["type"] == "overlay"],
            log[0],
        )
        assert 0 == stage.stage_out(ctx)[0]

    def test_read_only_rootfs(self, stage: Stage) -> None:
        """root.readonly: the overlays are mounted read-only too."""
        ctx, _ = stage.stage_in("c1", readonly=True)
        staged = json.loads((Path(ctx.bundle) / "config.json").read_text())
        assert {True} == {"ro" in m["options"] for m in staged["mounts"]
                          if m["type"] == "overlay"}
        assert 0 == stage.stage_out(ctx)[0]

    def test_concurrent_stage_ins_share_one_entry(self, stage: Stage) -> None:
        """Six containers of one image staged at once: all succeed, one copies the rootfs
        into the cache and the others wait for that copy (none is made and discarded),
        each has staging of its own."""
        def one(n: int) -> subprocess.CompletedProcess[str]:
            bundle = stage.bundle(f"p{n}", stage.image)
            ctx = stage.ctx(f"p{n}", bundle, stage.image)
            args = {"script": str(stage.script), "id": ctx.container_id,
                    "paths": [getattr(ctx, k) for k in HookPaths._fields],
                    "job": [ctx.job_id, ctx.user_id, ctx.group_id, ctx.env]}
            return subprocess.run([sys.executable, "-c", DRIVER, json.dumps(args)],
                                  capture_output=True, text=True, timeout=120, check=False)
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(one, range(6)))
        assert [0] * 6 == [r.returncode for r in results], [r.stderr for r in results]
        [entry] = stage.entries()
        staged = [json.loads(r.stdout.splitlines()[-1]) for r in results]
        assert (
            "6", [], [], 6, [f"p{n}" for n in range(6)],
        ) == (
            (entry / "uses").read_text().strip(), sorted((stage.cache / "tmp").iterdir()),
            sorted((stage.cache / "trash").iterdir()), len({s["bundle"] for s in staged}),
            sorted(p.name for p in (entry / "users").iterdir()),
        )
        logs = "".join(r.stderr for r in results)
        # the others found the entry, or waited for it
        assert (1, 5, 0) == (logs.count("(miss)"), logs.count(": no copy"),
                             logs.count("discarded")), logs

    def test_eviction(self, stage: Stage) -> None:
        """Beyond CACHE_MAX_MB the least recently used entry no live job uses goes; an
        entry in use stays until its container is done."""
        a_image = stage.image
        b_image = stage.copy_image("image-b")
        (b_image / "etc" / "b").write_text("b\n")
        a, _ = stage.stage_in("a", a_image)
        [a_entry] = stage.entries()
        size_kb = int((a_entry / "size").read_text())
        stage.write_script(CACHE_MAX_MB=str((size_kb + size_kb // 2) / 1024))
        b, log = stage.stage_in("b", b_image)  # a is in use: both stay
        assert 2 == len(stage.entries()), log
        _, log = stage.stage_out(a)  # a is done, and the older: it goes
        b_entry = Path(Path(b.bundle, "cache-entry").read_text().strip())
        assert ([b_entry], [f"evicted cache entry {a_entry.name}"]) == (
            stage.entries(), [m for m in log if "evicted" in m])
        assert 0 == stage.stage_out(b)[0]
        c, log = stage.stage_in("c", stage.copy_image("image-a2"))  # a again: b goes
        assert (f"evicted cache entry {b_entry.name}", [a_entry.name]) == (
            next(m for m in log if "evicted" in m), [p.name for p in stage.entries()])
        assert 0 == stage.stage_out(c)[0]
        assert [] == sorted((stage.cache / "trash").iterdir())

    def test_stale_registration_does_not_pin(self, stage: Stage) -> None:
        """A registration whose job squeue no longer knows (an anchor that died) does not
        keep an entry from eviction."""
        a, _ = stage.stage_in("a")
        [a_entry] = stage.entries()
        stage.write_script(CACHE_MAX_MB="0")
        stage.squeue(SQUEUE_GONE)
        b_image = stage.copy_image("image-b")
        (b_image / "etc" / "b").write_text("b\n")
        b, log = stage.stage_in("b", b_image, job_id=43)
        assert ([f"evicted cache entry {a_entry.name}"], 1) == (
            [m for m in log if "evicted" in m], len(stage.entries()))
        # a's own staging dir is gone with its entry's registration; clean up
        subprocess.run(["chmod", "-R", "u+rwX", a.bundle], check=True)
        shutil.rmtree(a.bundle)
        stage.squeue(SQUEUE_LIVE)
        assert 0 == stage.stage_out(b)[0]
        assert [] == stage.entries()  # over the bound of 0 and unused

    def test_entry_that_lost_files_is_made_again(self, stage: Stage) -> None:
        """An entry with fewer files than it was made with (an age-based /tmp cleaner):
        made again when no container uses it; while one does, the next is copied."""
        a, _ = stage.stage_in("a")
        [entry] = stage.entries()
        (entry / "rootfs" / "etc" / "motd").unlink()
        b, log = stage.stage_in("b", stage.copy_image("image-b"))
        assert (
            ["b: its cache entry lost files and a container still uses it (status 6: "
             f"key={entry.name}): copying the rootfs"],
            "hi\n", [entry],
        ) == (
            [m for m in log if "lost files" in m],
            (Path(b.root_path) / "etc" / "motd").read_text(), stage.entries(),
        )
        for ctx in (a, b):
            assert 0 == stage.stage_out(ctx)[0]
        c, log = stage.stage_in("c", stage.copy_image("image-c"))
        assert (
            [f"evicted cache entry {entry.name}",
             f"c: copied {stage.tmp / 'image-c'} to the cache as {entry} (miss)"],
            "hi\n", "1",
        ) == (
            [m for m in log if "evicted" in m or "(miss)" in m],
            (entry / "rootfs" / "etc" / "motd").read_text(), (entry / "uses").read_text().strip(),
        )
        assert 0 == stage.stage_out(c)[0]

    def test_leftovers_of_crashed_stage_ins_are_removed(self, stage: Stage) -> None:
        """A copy in tmp/ or an entry in trash/ a day old (a stage_in that died) goes at
        the next stage_out; younger ones (a stage_in at work) stay."""
        ctx, _ = stage.stage_in("a")
        old = [stage.cache / "tmp" / "k.dead", stage.cache / "trash" / "k.dead.1"]
        young = stage.cache / "tmp" / "k.busy"
        for path in [*old, young]:
            (path / "rootfs").mkdir(parents=True)
        for path in old:
            os.utime(path, (0, 0))
        assert 0 == stage.stage_out(ctx)[0]
        assert ([False, False], True) == ([p.exists() for p in old], young.exists())

    def test_overlay_unusable_falls_back_to_the_copy(self, stage: Stage) -> None:
        """Where the overlay cannot be mounted (here: no unshare), one log line and the
        copy of today."""
        (stage.bin / "unshare").write_text("#!/bin/sh\necho 'unshare: not here' >&2\nexit 1\n")
        (stage.bin / "unshare").chmod(0o755)
        ctx, log = stage.stage_in("c1")
        assert (
            ["c1: overlayfs cannot be mounted here (status 3: unshare: not here): copying "
             "the rootfs"],
            "hi\n", [],
        ) == (
            [m for m in log if "cannot" in m],
            (Path(ctx.root_path) / "etc" / "motd").read_text(), stage.entries(),
        )
        assert 0 == stage.stage_out(ctx)[0]


@needs_overlay
@needs_crun
class TestContainers:
    def test_writes_stay_in_the_upper_and_go_back(self, stage: Stage) -> None:
        """A container that writes, deletes and makes a directory: the cache entry is
        unchanged, the changes reach the engine's rootfs at stage_out (a whiteout
        included), and the next container of the same image does not see them."""
        pristine = stage.copy_image("pristine")
        ctx, _ = stage.stage_in(
            "w1", stage.image, "cat /data/input; echo x > /etc/new; rm /etc/motd; "
            "mkdir /newdir; rm -rf /usr/lib")
        [entry] = stage.entries()
        before = _tree(entry / "rootfs")
        res = stage.run(ctx)
        rc, log = stage.stage_out(ctx)
        assert (0, "in\n", 0, before, True, False, True, False) == (
            res.returncode, res.stdout, rc, _tree(entry / "rootfs"),
            (stage.image / "etc" / "new").is_file(), (stage.image / "etc" / "motd").exists(),
            (stage.image / "newdir").is_dir(), (stage.image / "usr" / "lib").exists(),
        ), res.stderr
        assert ["w1: copied the container's changes back to " + str(stage.image)] == [
            m for m in log if "back" in m]
        fresh, log = stage.stage_in("w2", pristine, "ls /etc; ls /usr/lib")
        res = stage.run(fresh)
        assert (0, ["hosts", "motd", "libx.so"], [entry]) == (
            res.returncode, res.stdout.split(), stage.entries()), (res.stderr, log)
        assert 0 == stage.stage_out(fresh)[0]

    def test_tasks_write_into_uppers_of_their_own(self, stage: Stage) -> None:
        """Two tasks of one job (one config.json) run at once from the cache: each sees
        the image and its own write only; the cache entry and the staged uppers stay as
        they were, and .scrun-uppers shows nothing inside the container."""
        ctx, log = stage.stage_in(
            "t1", stage.image, "echo $T > /etc/task; sleep 1; cat /etc/motd /etc/task; "
            "ls -A /.scrun-uppers | wc -l", tasks="2")
        [entry] = stage.entries()
        before = (_tree(entry / "rootfs"), _tree(Path(ctx.root_path) / ".scrun-uppers"))
        config = Path(ctx.bundle) / "config.json"
        data = json.loads(config.read_text())
        runs = []
        for task in ("0", "1"):
            data["process"]["env"] = ["PATH=/bin", f"T=task{task}"]
            config.write_text(json.dumps(data))
            runs.append(subprocess.Popen(
                ["crun", "--rootless=true", f"--root={stage.tmp}/oci", "run", "--bundle",
                 ctx.bundle, f"t1-{task}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
            time.sleep(0.2)
        outs = [r.communicate(timeout=60) for r in runs]
        after = (_tree(entry / "rootfs"), _tree(Path(ctx.root_path) / ".scrun-uppers"))
        assert ([0, 0], ["hi\ntask0\n0\n", "hi\ntask1\n0\n"], before) == (
            [r.returncode for r in runs], [o[0] for o in outs], after), (outs, log)
        rc, log = stage.stage_out(ctx)
        assert (0, False) == (rc, (stage.image / "etc" / "task").exists()), log

    def test_reader_copies_nothing_back(self, stage: Stage) -> None:
        """A container that only reads: stage_out has nothing to copy back."""
        ctx, _ = stage.stage_in("r1", stage.image, "cat /etc/motd /etc/hosts /data/input")
        res = stage.run(ctx)
        rc, log = stage.stage_out(ctx)
        assert (0, "hi\n127.0.0.1 localhost\nin\n", 0,
                ["r1: the container changed nothing in its rootfs: no copy back"]) == (
            res.returncode, res.stdout, rc, [m for m in log if "back" in m]), res.stderr
