"""Real-size images through the staging scripts on the site topology (docs/site.md):
`docker run --rm IMAGE echo ran` and `podman run --rm IMAGE echo ran` of a ~150 MB
python image and a ~1 GB image of many small files (scripts/bench-images.sh),
interleaved, through

* scrun-py with the shipped lua/scrun-staging.lua, its bases on the shared scratch as the
  site cluster sets them (runtime `slurm`),
* Slurm's own scrun with scrun(1)'s rsync staging example, `scratch_path` on the shared
  scratch (runtime `slurm-scrun`; the example's text is tests/e2e/test_site.py's, after
  SLURM_JSON: the JSON functions the example needs where Slurm's lack or fail), and
* the plain runtime on the login node (docker: runc, podman: crun).

    sudo scripts/cluster.sh up --slurm R --nodes 3
    sudo scripts/bench-images.sh import
    eval "$(scripts/cluster.sh env --slurm R --nodes 3 | sed 's/^/export /')"
    sudo -E /opt/scrun-py/venv/bin/python -m bench.run --images [-n N]

Rows (bench/results/images-<release>.json):

* first run (scrun-py: the image's cache entry removed before each) and warm runs, wall
  time median; CPU time on the login node (cpuacct of the bench's cgroup, where the
  engines, the runtimes, salloc and the staging run, plus podman's and docker's container
  cgroups): the nodes' slurmd and steps are in none of them;
* bytes on the scratch while one container of the image runs (`du` of the job user's
  scratch directory, less what was there before), and what is left after `rm`;
* ten containers of one image started at once through scrun-py, the cache entry removed
  before: wall time of each, entries made, what is left after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    PODMAN_CRUN_ULIMITS,
    REPO,
    SCRUN,
    SLURM_BIN,
    Ctx,
    Hang,
    end_container,
)

IMAGES_DIR = Path(os.environ.get("SCRUN_BENCH_IMAGES", "/var/tmp/scrun-bench-images"))
SCRATCH = Path(os.environ.get("SCRUN_TEST_SCRATCH", "/shared/scratch"))
CONFIGLESS = Path("/run/slurm/conf")
IMAGES = {"scrun-bench-conda": "many files, ~1 GB", "scrun-bench-py": "python, ~150 MB"}
#: the runtimes side by side: the engine's own, scrun-py with the staging script, Slurm's
#: scrun with scrun(1)'s rsync example; and on request (run.py --example-on-scrun-py)
#: scrun-py with that example (its staging commands, which dominate the time, are the
#: same whichever runtime runs them)
ALL_RUNTIMES = {"plain": None, "scrun-py": "slurm", "rsync example": "slurm-rsync",
                "Slurm's scrun": "slurm-scrun"}
RUNTIMES = {k: v for k, v in ALL_RUNTIMES.items() if k != "rsync example"}
CGROUP = Path("/sys/fs/cgroup/cpuacct")
#: runtimes left out of the rows: Slurm's scrun when its probe failed (probe_slurm_scrun)
GIVEN_UP: set[str] = set()
#: the engines of the rows (run.py --tools)
TOOLS: list[str] = ["docker", "podman"]
RUN_S = 150  # one `run` of the 1 GB image through a copy takes tens of seconds
#: what each container runs: it prints, so that a run whose container never ran (Slurm's
#: scrun exits 0 when its step fails) is not taken for a fast one
RAN = ["echo", "ran"]
RAN_OUTPUT = "ran\n"


def man_page_example() -> str:
    """scrun(1)'s rsync staging example as tests/e2e/test_site.py installs it."""
    text = (REPO / "tests" / "e2e" / "test_site.py").read_text()
    found = re.search(r'MAN_PAGE_EXAMPLE = """(.*?)"""', text, re.S)
    if not found:
        raise SystemExit("tests/e2e/test_site.py: no MAN_PAGE_EXAMPLE")
    return found.group(1).replace('local scratch_path = "/shared/scratch"',
                                  f'local scratch_path = "{SCRATCH}"')


#: put before the example for Slurm's scrun.  Slurm before 25.11 has no slurm.from_json
#: and slurm.to_json (its scrun(1) example loads a JSON module): Debian's dkjson stands in
#: for them there.  Where Slurm links Lua 5.1 (Debian's packages and the test clusters),
#: its `slurm.to_json` fails on every table with an array in it ("invalid key to 'next'":
#: it turns each numeric key into a string while `lua_next` walks the table), so the
#: example's stage_in fails and Slurm's `create` never returns: this encoder stands in for
#: it there, writing an empty table as [] as Slurm's does.
SLURM_JSON = r"""if slurm.from_json == nil then
     -- Slurm before 25.11: scrun(1)'s example of those releases decodes and encodes with
     -- a JSON module ("local json = require 'json'"); Debian's lua-dkjson is one
     package.path = "/usr/share/lua/5.1/?.lua;"..package.path
     local json = require("dkjson")
     slurm.from_json = function(text) return (json.decode(text)) end
     slurm.to_json = function(value) return json.encode(value) end
     slurm.log_info("no slurm.from_json (Slurm before 25.11): the example uses dkjson")
elseif not pcall(slurm.to_json, {"probe"}) then
     local function encode(v)
          local kind = type(v)
          if kind == "string" then
               return '"'..(v:gsub('[%c"\\]', function(c)
                    return string.format("\\u%04x", c:byte()) end))..'"'
          elseif kind == "number" then
               if v == math.floor(v) then return string.format("%d", v) end
               return string.format("%.17g", v)
          elseif kind == "boolean" then
               return tostring(v)
          elseif kind ~= "table" then
               return "null"
          end
          local parts = {}
          if #v > 0 or next(v) == nil then
               for i = 1, #v do parts[i] = encode(v[i]) end
               return "["..table.concat(parts, ",").."]"
          end
          for k, x in pairs(v) do parts[#parts + 1] = encode(tostring(k))..":"..encode(x) end
          return "{"..table.concat(parts, ",").."}"
     end
     slurm.to_json = encode
     slurm.log_info("slurm.to_json fails on arrays (Lua 5.1): the example encodes itself")
end
"""


def staging_lua() -> str:
    """lua/scrun-staging.lua with its bases on the shared scratch, as the site sets them."""
    text = (REPO / "lua" / "scrun-staging.lua").read_text()
    text = re.sub(r'(?m)^local STAGING_BASE = .*$',
                  f'local STAGING_BASE = "{SCRATCH}/%u/scrun-staging"', text)
    return re.sub(r'(?m)^local CACHE_BASE = .*$',
                  f'local CACHE_BASE = "{SCRATCH}/%u/scrun-cache"', text)


def site_confs(work: Path) -> dict[str, Path]:
    """One configuration directory per runtime: the login node's configless copies
    (slurm.conf, oci.conf), with that runtime's scrun.lua beside them."""
    out = {}
    for kind, lua in (("py", staging_lua()), ("rsync", man_page_example()),
                      ("slurm", SLURM_JSON + man_page_example())):
        conf = work / f"conf-{kind}"
        conf.mkdir(exist_ok=True)
        for f in CONFIGLESS.iterdir():
            if f.is_file() and f.name != "scrun.lua":
                shutil.copy(f, conf / f.name)
        (conf / "scrun.lua").write_text(lua)
        if kind == "slurm":
            # Slurm's scrun starts srun without PATH: sh's default finds another release's
            oci = conf / "oci.conf"
            oci.write_text(oci.read_text().rstrip("\n") + f"\nSrunPath={SLURM_BIN / 'srun'}\n")
        exe = str(SLURM_BIN / "scrun") if kind == "slurm" else SCRUN
        # podman passes no --root; Slurm's scrun will not guess one as root
        (conf / "runtime").write_text(
            f"#!/bin/sh\n[ -n \"$XDG_RUNTIME_DIR\" ] || set -- --root {conf}/root \"$@\"\n"
            f"exec {exe} -f {conf}/slurm.conf \"$@\"\n")
        os.chmod(conf / "runtime", 0o755)
        out[kind] = conf
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
    return out


# ------------------------------------------------------------------ CPU time


def _usage(path: Path) -> int:
    try:
        return int((path / "cpuacct.usage").read_text())
    except (OSError, ValueError):
        return 0


@dataclass
class Cpu:
    """CPU time of the login node's side of a run: the bench's own cgroup (the engines
    started after it, the runtimes, salloc, the staging) and the engines' container
    cgroups (podman's conmon and the containers, docker's containers)."""

    mine: Path = CGROUP / f"scrun-bench-images-{os.getpid()}"
    others: tuple[Path, ...] = (CGROUP / "libpod_parent", CGROUP / "docker")

    def enter(self) -> None:
        self.mine.mkdir(exist_ok=True)
        (self.mine / "cgroup.procs").write_text(str(os.getpid()))

    def leave(self) -> None:
        (CGROUP / "cgroup.procs").write_text(str(os.getpid()))
        try:
            self.mine.rmdir()
        except OSError:
            pass

    def now(self) -> int:
        return _usage(self.mine) + sum(_usage(p) for p in self.others)


# ------------------------------------------------------------------ engines


@dataclass
class Engines:
    """A private dockerd (its data on the machine's disk beside the image tarballs) and
    root podman, each with the three runtimes; the bench images in both."""

    work: Path
    confs: dict[str, Path]
    docker_env: dict[str, str] = field(default_factory=dict)
    podman_env: dict[str, str] = field(default_factory=dict)
    dockerd: subprocess.Popen[bytes] | None = None
    #: dockerd's exec root, where containerd's shim runs the runtime: srun passes its
    #: working directory on to the step, and a node that lacks it fails the step (26.05:
    #: `_pre_task_child_privileged() failed`) under Slurm's scrun: a directory the nodes
    #: have, not one under the login node's /tmp
    exec_root: Path = field(default_factory=lambda: Path(f"/var/lib/scrun-bench-dx{os.getpid()}"))

    def start(self) -> None:
        path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        if Path("/usr/bin") != SLURM_BIN:
            path = f"{SLURM_BIN}:{path}"
        (self.work / "containers.conf").write_text(
            '[containers]\nnetns = "none"\n\n[engine.runtimes]\n'
            f'slurm = ["{self.confs["py"]}/runtime"]\n'
            f'slurm-rsync = ["{self.confs["rsync"]}/runtime"]\n'
            f'slurm-scrun = ["{self.confs["slurm"]}/runtime"]\n')
        self.podman_env = {"PATH": path, "HOME": "/root",
                           "CONTAINERS_CONF": str(self.work / "containers.conf")}
        ddir = IMAGES_DIR / "dockerd"
        ddir.mkdir(parents=True, exist_ok=True)
        (ddir / "daemon.json").write_text(json.dumps({"runtimes": {
            name: {"path": exe, "runtimeArgs": ["-f", f"{self.confs[kind]}/slurm.conf"]}
            for name, kind, exe in (("slurm", "py", SCRUN), ("slurm-rsync", "rsync", SCRUN),
                                    ("slurm-scrun", "slurm", str(SLURM_BIN / "scrun")))}}))
        sock = self.work / "docker.sock"
        self.docker_env = {"PATH": path, "HOME": "/root", "DOCKER_HOST": f"unix://{sock}"}
        with open(self.work / "dockerd.log", "wb") as log:
            self.dockerd = subprocess.Popen(
                ["dockerd", "--config-file", str(ddir / "daemon.json"), "--host",
                 self.docker_env["DOCKER_HOST"], "--data-root", str(ddir / "data"),
                 "--exec-root", str(self.exec_root), "--pidfile",
                 str(self.work / "docker.pid"), "--iptables=false", "--ip6tables=false",
                 "--bridge=none", "--storage-driver=overlay2"],
                env=self.docker_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "version"], env=self.docker_env,
                             capture_output=True, check=False).returncode != 0:
            if self.dockerd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.work / "dockerd.log").read_text()[-500:])
            time.sleep(0.2)
        for image in IMAGES:
            for tool, env, ref in (("docker", self.docker_env, image),
                                   ("podman", self.podman_env, f"localhost/{image}")):
                if subprocess.run([tool, "image", "inspect", ref], env=env,
                                  capture_output=True, check=False).returncode == 0:
                    continue
                tar = IMAGES_DIR / f"{image}.tar"
                if not tar.exists():
                    raise SystemExit(f"no {tar}: run scripts/bench-images.sh import")
                with open(tar, "rb") as f:
                    subprocess.run([tool, "import", "-", ref], env=env, stdin=f,
                                   capture_output=True, check=True, timeout=RUN_S)

    def stop(self) -> None:
        if self.dockerd:
            ids = subprocess.run(["docker", "ps", "-aq"], env=self.docker_env,
                                 capture_output=True, text=True, check=False).stdout.split()
            if ids:
                subprocess.run(["docker", "rm", "-f", *ids], env=self.docker_env,
                               capture_output=True, check=False, timeout=RUN_S)
            self.dockerd.terminate()
            self.dockerd.wait(timeout=60)
        shutil.rmtree(self.exec_root, ignore_errors=True)

    def argv(self, tool: str, runtime: str | None, image: str, detach: bool = False) -> tuple[
            list[str], dict[str, str]]:
        """`run` of `tool` with `runtime` (None: the engine's own) of `image`."""
        rt = runtime or ("crun" if tool == "podman" else "runc")
        if tool == "podman":
            argv = ["podman", "run", "--network", "none", *PODMAN_CRUN_ULIMITS,
                    "--runtime", rt]
            ref, env = f"localhost/{image}", self.podman_env
        else:
            # docker's ping_group_range: the example keeps it, crun cannot set it there
            argv = ["docker", "run", "--network", "none", "--sysctl",
                    "net.ipv4.ping_group_range=0 0", "--runtime", rt]
            ref, env = image, self.docker_env
        if detach:
            return [*argv, "-d", ref, "sleep", "600"], env
        return [*argv, "--rm", ref, *RAN], env


def run_once(argv: list[str], env: dict[str, str], cpu: Cpu,
             work: Path) -> tuple[float, float]:
    """Wall and login-node CPU seconds of one `run` (argv: up to the image); a run that
    takes more than RUN_S is a hang (Hang): its anchor and job are ended, its container
    removed."""
    cidfile = work / f"run-{time.monotonic_ns()}.cid"
    argv = [*argv[:2], "--cidfile", str(cidfile), *argv[2:]]
    c0, t0 = cpu.now(), time.perf_counter()
    try:
        res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                             timeout=RUN_S, check=False)
    except subprocess.TimeoutExpired as exc:
        end_hung(argv[0], env, cidfile)
        raise Hang(" ".join(argv)) from exc
    wall, used = time.perf_counter() - t0, (cpu.now() - c0) / 1e9
    if res.returncode != 0 or res.stdout != RAN_OUTPUT.encode():
        raise RuntimeError(f"{' '.join(argv)}: exit {res.returncode}, stdout "
                           f"{res.stdout[-100:]!r}: {res.stderr.decode()[-800:]}")
    return wall, used


def cache_dir(uid: int = 0) -> Path:
    return SCRATCH / str(uid) / "scrun-cache"


def forget_cache(uid: int = 0) -> None:
    """The staging script's cache of the job user emptied: the next run is a first run.
    Then a wait: ext4 makes new inodes slowly while many were removed in the last
    dirty_expire_centisecs (its allocator skips each recently deleted inode, a lookup per
    inode: a copy of the 1 GB image took 45-55 s right after the removal of one, 20-25 s
    without), and a first run is not to be charged for the removal of the entry before."""
    shutil.rmtree(cache_dir(uid) / "known", ignore_errors=True)
    entries = cache_dir(uid) / "entries"
    removed = False
    if entries.is_dir():
        for entry in entries.iterdir():
            shutil.rmtree(entry, ignore_errors=True)
            removed = True
    if removed:
        try:
            expire_s = int(Path("/proc/sys/vm/dirty_expire_centisecs").read_text()) / 100
        except (OSError, ValueError):
            expire_s = 30.0
        time.sleep(expire_s + 5)


def du_kb(path: Path) -> int:
    if not path.exists():
        return 0
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True,
                         check=False).stdout.split()
    return int(out[0]) if out else 0


def med(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


# ------------------------------------------------------------------ rows


@dataclass
class _Group:
    """The samples of one engine and image, per (first or warm, runtime)."""

    eng: Engines
    cpu: Cpu
    tool: str
    image: str
    walls: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    cpus: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    hangs: dict[str, int] = field(default_factory=dict)

    def sample(self, kind: str, who: str) -> None:
        if who in GIVEN_UP or self.hangs.get(who, 0) >= 2:
            return
        argv, env = self.eng.argv(self.tool, RUNTIMES[who], self.image)
        try:
            w, c = run_once(argv, env, self.cpu, self.eng.work)
        except (Hang, RuntimeError) as exc:
            self.hangs[who] = self.hangs.get(who, 0) + 1
            print(f"[images] {self.tool} {self.image} {who} {kind}: failed or hung: "
                  f"{str(exc)[-300:]}", flush=True)
            return
        self.walls.setdefault((kind, who), []).append(w)
        self.cpus.setdefault((kind, who), []).append(c)
        print(f"[images] {self.tool} {self.image} {who} {kind}: {w:.2f} s, cpu {c:.2f} s",
              flush=True)

    def row(self, kind: str) -> dict[str, object]:
        row: dict[str, object] = {"name": f"{self.tool} run --rm {self.image} echo ran "
                                          f"({IMAGES[self.image]}), {kind} run"}
        for who in RUNTIMES:
            w = self.walls.get((kind, who), [])
            row[who] = {"median_s": med(w), "min_s": min(w, default=None),
                        "max_s": max(w, default=None), "n": len(w),
                        "cpu_median_s": med(self.cpus.get((kind, who), [])),
                        "hangs_in_image_and_engine": self.hangs.get(who, 0)}
        return row


def timing_rows(eng: Engines, cpu: Cpu, n: int, first_n: int,
                rows: list[dict[str, object]], save: Callable[[], None]) -> None:
    """Per engine and image: first and warm runs of the three runtimes, interleaved;
    each pair of rows added to `rows` and saved as soon as it is measured."""
    for image in IMAGES:
        for tool in TOOLS:
            group = _Group(eng, cpu, tool, image)
            for _ in range(first_n):
                forget_cache()
                for who in RUNTIMES:
                    group.sample("first", who)
            for _ in range(n):
                for who in RUNTIMES:
                    group.sample("warm", who)
            rows += [group.row("first"), group.row("warm")]
            save()


def probe_slurm_scrun(eng: Engines) -> dict[str, object]:
    """One `docker run` of the small image through Slurm's scrun with the example, bounded
    by 30 s (the small image's staging takes about a second): where it fails or hangs, its
    rows are left out."""
    argv, env = eng.argv("docker", "slurm-scrun", "scrun-bench-py")
    cidfile = eng.work / "probe.cid"
    argv = [*argv[:2], "--cidfile", str(cidfile), *argv[2:]]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=30, check=False)
        out = {"exit": res.returncode, "stdout": res.stdout[-100:],
               "stderr": res.stderr[-400:]}
    except subprocess.TimeoutExpired:
        out = {"exit": None, "stderr": "no answer in 30 s"}
        end_hung("docker", env, cidfile)
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    if out["exit"] != 0 or out.get("stdout") != RAN_OUTPUT:
        GIVEN_UP.add("Slurm's scrun")
    print(f"[images] Slurm's scrun probe: {out}", flush=True)
    return out


def end_hung(tool: str, env: dict[str, str], cidfile: Path) -> None:
    """After a `run` that gave no answer: the anchor and job of the container its
    --cidfile names ended, and the container removed."""
    engine_id = cidfile.read_text().strip() if cidfile.exists() else ""
    if engine_id:
        end_container(engine_id, dict(os.environ))
        remove_container(tool, env, engine_id)


def remove_container(tool: str, env: dict[str, str], cid: str) -> None:
    """`rm -f`; where the engine keeps the container (Slurm's scrun's `delete` failed or
    hung), its anchor and job are ended and `rm -f` tried again."""
    def rm() -> bool:
        try:
            subprocess.run([tool, "rm", "-f", cid], env=env, capture_output=True,
                           check=False, timeout=RUN_S)
        except subprocess.TimeoutExpired:
            pass
        return subprocess.run([tool, "inspect", cid], env=env, capture_output=True,
                              check=False).returncode != 0
    if not rm():
        end_container(cid, dict(os.environ))
        if not rm():
            print(f"[images] {tool} kept container {cid}", flush=True)


def scratch_rows(eng: Engines) -> list[dict[str, object]]:
    """KB on the job user's scratch directory while one container runs (first: the cache
    entry removed before; warm: after a run), and what is left after `rm -f`."""
    rows: list[dict[str, object]] = []
    user_dir = SCRATCH / "0"
    for image in IMAGES:
        for tool in TOOLS:
            row: dict[str, object] = {"name": f"{tool} {image}: KB on the scratch"}
            for who, rt in RUNTIMES.items():
                if rt is None or who in GIVEN_UP:
                    continue
                got = {}
                for kind in ("first", "warm"):
                    if kind == "first":
                        forget_cache()
                    before = du_kb(user_dir)
                    argv, env = eng.argv(tool, rt, image, detach=True)
                    cid = subprocess.run(argv, env=env, capture_output=True, text=True,
                                         check=True, timeout=RUN_S).stdout.strip()
                    during = du_kb(user_dir)
                    remove_container(tool, env, cid)
                    after = du_kb(user_dir)
                    got[kind] = {"written_kb": during - before, "left_kb": after - before}
                row[who] = got
                print(f"[images] {row['name']} {who}: {got}", flush=True)
            rows.append(row)
    return rows


def concurrent_row(eng: Engines, cpu: Cpu, image: str, tool: str,
                   count: int = 10) -> dict[str, object]:
    """`count` containers of one image started at once through scrun-py, its cache entry
    removed before: each one's wall time, the entries made, what is left afterwards."""
    forget_cache()
    argv, env = eng.argv(tool, "slurm", image)
    entries = cache_dir() / "entries"

    def one(_i: int) -> float:
        t = time.perf_counter()
        subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                       check=True, timeout=RUN_S)
        return time.perf_counter() - t

    c0 = cpu.now()
    with ThreadPoolExecutor(count) as pool:
        walls = list(pool.map(one, range(count)))
    used = (cpu.now() - c0) / 1e9
    made = sorted(p.name for p in entries.iterdir()) if entries.is_dir() else []
    uses = [int((entries / m / "uses").read_text()) for m in made]
    staging = SCRATCH / "0" / "scrun-staging"
    left = sorted(p.name for p in staging.iterdir()) if staging.is_dir() else []
    tmp = cache_dir() / "tmp"
    tmp_left = [p.name for p in tmp.iterdir()] if tmp.is_dir() else []
    ps = subprocess.run([tool, "ps", "-aq"], env=env, capture_output=True, text=True,
                        check=False).stdout.split()
    row = {"name": f"{count} x {tool} run --rm {image} echo ran at once (scrun-py, cache empty)",
           "walls_s": [round(w, 2) for w in sorted(walls)], "max_s": round(max(walls), 2),
           "median_s": med(walls), "cpu_s": round(used, 2), "entries": len(made),
           "uses": uses, "staging_left": left, "cache_tmp_left": tmp_left,
           "containers_left": len(ps)}
    print(f"[images] {row}", flush=True)
    return row


def print_rows(rows: list[dict[str, object]]) -> None:
    print(f"\n| row | {' | '.join(RUNTIMES)} | scrun-py / Slurm's scrun |")
    print("|---|" + "---|" * (len(RUNTIMES) + 1))
    for row in rows:
        cells = []
        for who in RUNTIMES:
            d = row.get(who) or {}
            assert isinstance(d, dict)
            cells.append(f"{d.get('median_s')} s (cpu {d.get('cpu_median_s')} s)")
        py, sl = (row.get("scrun-py") or {}), (row.get("Slurm's scrun") or {})
        assert isinstance(py, dict) and isinstance(sl, dict)
        ratio = (f"{py['median_s'] / sl['median_s']:.2f}x"
                 if py.get("median_s") and sl.get("median_s") else "-")
        print(f"| {row['name']} | {' | '.join(cells)} | {ratio} |")


def images_rows(ctx: Ctx, first_n: int,
                save: Callable[[dict[str, object]], None]) -> dict[str, object]:
    """Every row of this bench, saved as they come (`save`: a bench cut short by its
    time limit keeps what it measured); the engines started and stopped around them."""
    if not CONFIGLESS.is_dir() or os.environ.get("SCRUN_TEST_SITE") != "1":
        raise SystemExit("not the site cluster: scripts/cluster.sh up --slurm R --nodes 3 "
                         "and the environment `cluster.sh env` prints")
    # podman runs the runtime in its own working directory, and the job's steps start
    # there: a directory the nodes have (not the work directory in the login node's /tmp)
    os.chdir("/")
    cpu = Cpu()
    cpu.enter()
    eng = Engines(ctx.work, site_confs(ctx.work))
    rows: list[dict[str, object]] = []
    scratch: list[dict[str, object]] = []
    conc: list[dict[str, object]] = []
    got: dict[str, object] = {"rows": rows, "scratch": scratch, "concurrent": conc}
    # a time limit's SIGTERM: the engines are still stopped (finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        eng.start()
        print("[images] engines up, images in", flush=True)
        got["slurm_scrun_probe"] = probe_slurm_scrun(eng)
        timing_rows(eng, cpu, ctx.n, first_n, rows, lambda: save(got))
        print_rows(rows)
        conc.extend(concurrent_row(eng, cpu, "scrun-bench-conda", tool) for tool in TOOLS)
        save(got)
        scratch.extend(scratch_rows(eng))
        save(got)
    finally:
        eng.stop()
        cpu.leave()
    return got
