"""Side-by-side benchmark: scrun-py against its floors, measured in one run.

    sudo scripts/cluster.sh up && sudo /opt/scrun-py/venv/bin/python bench/run.py [-n N]

Prints a Markdown table (median, min, max, ratio to the floor) and writes
bench/results/latest.json.  Runs as the ordinary test user, like a real site; the
`podman run --rm` / `docker run --rm` rows run the engines of `scripts/engines.sh` as root,
and podman also rootless as the test user, each against the same command with its plain
runtime (crun, runc), and the `docker exec c true` row against runc's; `--engines-only`
runs only these rows.

Where the release under test has Slurm's own scrun (23.02 and later:
`$SCRUN_TEST_SLURM_PREFIX/bin/scrun` for a built release, /usr/bin/scrun when packaged),
the same rows run through it side by
side: lifecycle, `state`, anchor RSS, and `podman`/`docker run --rm` (a private dockerd
with both runtimes registered), scrun-py and Slurm's scrun each given the same
configuration directory (shared-filesystem scrun.lua, oci.conf with SrunPath).  Every
call of Slurm's scrun has a timeout: a hang is counted, its anchor and job ended, and
the run left out of the timings (never retried).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import pwd
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from site_install import as_user

STATE = Path(os.environ.get("SCRUN_TEST_STATE", "/var/lib/scrun-py-test"))
SLURM_PREFIX = os.environ.get("SCRUN_TEST_SLURM_PREFIX", "")
SLURM_BIN = Path(SLURM_PREFIX, "bin") if SLURM_PREFIX else Path("/usr/bin")
REPO = Path(__file__).resolve().parents[1]
HANG_S = 60
VENV = Path(os.environ.get("SCRUN_TEST_VENV", "/opt/scrun-py/venv"))
USER = os.environ.get("SCRUN_TEST_USER", "scruntest")
SCRUN = str(VENV / "bin" / "scrun-py")
# the backends rows (bench/backends.py) need the pyslurm that scripts/pyslurm.sh builds
# into the test virtualenv: with --install site they run the test virtualenv's scrun-py
BACKENDS_SCRUN = os.environ.get("SCRUN_BENCH_BACKENDS_SCRUN", SCRUN)
APPLETS = ("sh", "true", "sleep", "echo")
ENGINES_SH = Path(__file__).resolve().parents[1] / "scripts" / "engines.sh"
# podman (root) asks crun for nofile=1048576 and a large nproc; without CAP_SYS_RESOURCE
# crun's setrlimit fails, and conmon's own nproc hard limit is 32768 here
PODMAN_CRUN_ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")


def user_env(pw: pwd.struct_passwd) -> dict[str, str]:
    slurm = f"{SLURM_PREFIX}/bin:" if SLURM_PREFIX else ""
    return {"PATH": f"{VENV}/bin:{slurm}/usr/bin:/bin", "HOME": pw.pw_dir, "USER": pw.pw_name,
            "SLURM_CONF": str(STATE / "slurm.conf"), "XDG_RUNTIME_DIR": f"/run/user/{pw.pw_uid}"}


def make_bundle(path: Path, args: list[str]) -> None:
    for d in ("bin", "usr/bin", "proc", "dev", "sys", "tmp"):
        (path / "rootfs" / d).mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/busybox", path / "rootfs/bin/busybox")
    for a in APPLETS:
        for d in ("bin", "usr/bin"):
            (path / "rootfs" / d / a).symlink_to("/bin/busybox")
    subprocess.run(["crun", "spec", "--rootless"], cwd=path, check=True)
    cfg = json.loads((path / "config.json").read_text())
    cfg["process"].update(args=args, terminal=False)
    (path / "config.json").write_text(json.dumps(cfg))


def timed(fn: Callable[[], None], n: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def run(argv: list[str], env: dict[str, str], check: bool = True) -> None:
    res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         check=False,
                         stderr=subprocess.PIPE, timeout=300)
    if check and res.returncode != 0:
        raise RuntimeError(f"{argv}: {res.stderr.decode()[-500:]}")


def engine_env() -> dict[str, str]:
    """root's environment for docker and podman: `scripts/engines.sh env` (the engines
    find the cluster through their own configuration, so no SLURM_CONF)."""
    out = subprocess.run([str(ENGINES_SH), "env"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    # a release built into a prefix: its salloc/srun first (scrun-py takes them from PATH)
    slurm = f"{SLURM_PREFIX}/bin:" if SLURM_PREFIX else ""
    env = {"PATH": f"{slurm}/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/root",
           "LANG": "C.UTF-8"}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key] = value
    return env


def timing(name: str, samples: list[float], floor: str | None,
           **extra: object) -> dict[str, object]:
    """One row of the main table: the samples' median, min and max, its floor's name."""
    return {"name": name, "median_s": statistics.median(samples), "min_s": min(samples),
            "max_s": max(samples), "n": len(samples), "floor": floor, **extra}


def cache_uses(uid: int) -> dict[str, int]:
    """The staging script's cache of a user (the shipped CACHE_BASE, /tmp/scrun-cache-%u):
    entry key -> how many stage_ins used it."""
    found: dict[str, int] = {}
    entries = Path(f"/tmp/scrun-cache-{uid}") / "entries"
    if entries.is_dir():
        for entry in entries.iterdir():
            try:
                found[entry.name] = int((entry / "uses").read_text())
            except (OSError, ValueError):
                found[entry.name] = 0
    return found


def engine_rows(pw: pwd.struct_passwd, n: int) -> list[dict[str, object]]:
    """`podman run --rm` / `docker run --rm` of `true` in the test image, through the
    engines' configuration of scripts/engines.sh (runtime `slurm`: scrun-py with
    lua/scrun-staging.lua, its cache on), each next to the same command with the plain
    runtime: as root, and podman rootless as the test user with the environment the
    engine tests give it (its own vfs store).  The image ran before the timed runs (the
    warm-up), so each of them should stage from the cache entry: the row counts the
    stage_ins its runs added to the user's cache and the entries they made."""
    eng = engine_env()
    image = eng.get("SCRUN_TEST_IMAGE", "scrun-busybox")
    user = {k: v for k, v in eng.items() if k != "DOCKER_HOST"}
    user.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name,
                XDG_RUNTIME_DIR=f"/run/user/{pw.pw_uid}",
                PODMAN_IGNORE_CGROUPSV1_WARNING="1")
    podman = ["podman", "run", "--rm", "--network", "none"]
    # rootless podman passes the user's own limits, which crun can set
    engines = (("podman", "root", 0, [*podman, *PODMAN_CRUN_ULIMITS], eng, "crun"),
               ("docker", "root", 0, ["docker", "run", "--rm", "--network", "none"], eng,
                "runc"),
               ("podman", "rootless", pw.pw_uid, as_user(pw, podman), user, "crun"))
    out: list[dict[str, object]] = []
    for tool, who, uid, argv, env, plain in engines:
        img = f"localhost/{image}" if tool == "podman" else image
        base_row = f"{tool} run --rm true ({plain}, {who})"
        out.append(timing(base_row, timed(partial(run, [*argv, "--runtime", plain, img,
                                                         "true"], env), n), None))
        ours = partial(run, [*argv, "--runtime", "slurm", img, "true"], env)
        for _ in range(2):
            ours()
        before = cache_uses(uid)
        samples = timed(ours, n, warmup=0)
        after = cache_uses(uid)
        out.append(timing(f"{tool} run --rm true (scrun-py, {who})", samples, base_row,
                          cache={"uses_added": sum(v - before.get(k, 0)
                                                   for k, v in after.items()),
                                 "entries_made": len(set(after) - set(before))}))
    return out


EXEC_FLOOR = "docker exec c true (runc, root)"


def exec_rows(n: int) -> list[dict[str, object]]:
    """`docker exec c true` into a running container (`sleep 600` in the test image), as
    root with the engines of scripts/engines.sh: through runc (plain docker, the floor)
    and through scrun-py (runtime `slurm`: each exec a helper step of the container's
    job, on its node).  The first exec that succeeds is the sign the container runs;
    then 2 warm-up runs and `n` timed ones."""
    eng = engine_env()
    image = eng.get("SCRUN_TEST_IMAGE", "scrun-busybox")
    out: list[dict[str, object]] = []
    for who, runtime in (("runc", "runc"), ("scrun-py", "slurm")):
        name = f"scrun-bench-exec-{runtime}-{os.getpid()}"
        run(["docker", "run", "-d", "--network", "none", "--runtime", runtime, "--name",
             name, image, "sleep", "600"], eng)
        try:
            deadline = time.monotonic() + HANG_S
            while subprocess.run(["docker", "exec", name, "true"], env=eng,
                                 capture_output=True, timeout=HANG_S,
                                 check=False).returncode != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"docker exec into {name} ({who}) never succeeded")
                time.sleep(0.2)
            samples = timed(partial(run, ["docker", "exec", name, "true"], eng), n)
        finally:
            subprocess.run(["docker", "rm", "-f", name], env=eng, capture_output=True,
                           timeout=HANG_S, check=False)
        out.append(timing(f"docker exec c true ({who}, root)", samples,
                          None if runtime == "runc" else EXEC_FLOOR))
    return out


def print_rows(rows: list[dict[str, object]]) -> None:
    """The main table's timed rows, each with its ratio to its floor (stored in `ratio`)."""
    by_name = {r["name"]: r for r in rows}
    print("| what | median | min | max | n | ratio to floor |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        floor = by_name.get(str(r["floor"])) if r["floor"] else None
        ratio = (f"{float(r['median_s']) / float(floor['median_s']):.2f}x {r['floor']}"  # type: ignore[arg-type]
                 if floor else "floor")
        r["ratio"] = ratio
        cache = r.get("cache")
        note = (f"; cache: {cache['uses_added']} stage_ins of {r['n']} runs, "
                f"{cache['entries_made']} entries made" if isinstance(cache, dict) else "")
        print(f"| {r['name']} | {float(r['median_s']) * 1000:.0f} ms |"  # type: ignore[arg-type]
              f" {float(r['min_s']) * 1000:.0f} ms | {float(r['max_s']) * 1000:.0f} ms |"  # type: ignore[arg-type]
              f" {r['n']} | {ratio}{note} |")


def rss_kb(pid: int) -> int:
    """Peak resident set (VmHWM) of a process, in kB; 0 if it is gone."""
    return _proc_kb(f"/proc/{pid}/status", "VmHWM:")


def pss_kb(pid: int) -> int:
    """Proportional set size (shared pages split between their users), in kB."""
    return _proc_kb(f"/proc/{pid}/smaps_rollup", "Pss:")


def _proc_kb(path: str, key: str) -> int:
    try:
        text = Path(path).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def children_cpu_s() -> float:
    """user+system CPU seconds of every waited-for descendant so far (getrusage)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def daemons_cpu_s() -> float:
    """user+system CPU seconds of this cluster's slurmctld and slurmd(s) so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text().rpartition(") ")[2].split()
        except OSError:
            continue
        if (cmd and Path(cmd[0].decode(errors="replace")).name in ("slurmctld", "slurmd")
                and str(STATE / "slurm.conf").encode() in cmd):
            total += (int(stat[11]) + int(stat[12])) / tick
    return total


class Hang(Exception):
    """A call of Slurm's scrun, or its anchor, did not end within HANG_S."""


def slurm_scrun() -> Path | None:
    """Slurm's own scrun of the release under test, if it has one."""
    exe = SLURM_BIN / "scrun"
    return exe if os.access(exe, os.X_OK) else None


def call(argv: list[str], env: dict[str, str]) -> None:
    try:
        res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, check=False,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=HANG_S)
    except subprocess.TimeoutExpired as exc:
        raise Hang(" ".join(argv[-2:])) from exc
    if res.returncode != 0:
        raise RuntimeError(f"{argv}: {res.stderr.decode()[-500:]}")


def wait_gone(pid: int, what: str) -> None:
    """Until the process is gone or a zombie (it is not our child)."""
    deadline = time.monotonic() + HANG_S
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat.rpartition(") ")[2][:1] in "ZX":
            return
        if time.monotonic() > deadline:
            raise Hang(what)
        time.sleep(0.002)


def wait_exact(proc: subprocess.Popen[bytes], what: str) -> int:
    """`proc`'s exit status as soon as it exits, bounded by HANG_S (Hang).  Not
    Popen.wait(timeout): it polls with sleeps that double up to 50 ms, so a process that
    exits after 45 ms is seen after 63 (a create of 16 ms after 16): the lifecycle row
    read 135 ms against 107 timed exactly, and the ratio 2.18x against 1.85x."""
    fd = os.pidfd_open(proc.pid)
    try:
        exited, _, _ = select.select([fd], [], [], HANG_S)
    finally:
        os.close(fd)
    if not exited:
        proc.kill()
        proc.wait()
        raise Hang(what)
    return proc.wait()


def create_bounded(base: list[str], env: dict[str, str], bundle: Path, pid_file: Path,
                   cid: str) -> int:
    """`create`, bounded by HANG_S (Hang); the anchor's pid.  Its stdio is never a pipe
    we read: the anchor keeps it (the container's stdio)."""
    proc = subprocess.Popen([*base, "create", "--bundle", str(bundle), "--pid-file",
                             str(pid_file), cid], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rc = wait_exact(proc, f"create {cid}")
    if rc != 0:
        raise RuntimeError(f"create {cid}: exit {rc}")
    return int(pid_file.read_text())


def end_container(cid: str, env: dict[str, str]) -> None:
    """After a hang: kill what Slurm's scrun left for this container id (its processes
    carry the title `scrun: <id>`) and cancel its job (the job's ContainerID)."""
    title = f"scrun: {cid}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(title):
                    os.kill(int(entry), 9)
            except OSError:
                pass
    out = subprocess.run(["scontrol", "show", "job", "-o"], env=env, capture_output=True,
                         text=True, timeout=60, check=False).stdout
    for line in out.splitlines():
        if f" ContainerID={cid} " in f" {line} " and "JobState=RUNNING" in line:
            subprocess.run(["scancel", line.split()[0].partition("=")[2]], env=env,
                           check=False, timeout=60)


def guarded(fn: Callable[[str], None], n: int, cids: Callable[[], str],
            on_hang: Callable[[str], None], warmup: int = 2) -> tuple[list[float], int]:
    """Timings of n runs that did not hang, and the number that hung (after warm-up)."""
    samples: list[float] = []
    hangs = 0
    for i in range(warmup + n):
        cid = cids()
        t = time.perf_counter()
        try:
            fn(cid)
        except Hang:
            if i >= warmup:
                hangs += 1
            on_hang(cid)
            continue
        if i >= warmup:
            samples.append(time.perf_counter() - t)
    return samples, hangs


#: the site configurations the rows against Slurm's scrun run with, each its own rows:
#: (key, label, the oci.conf's text).  Both get SrunPath (Slurm's scrun starts srun
#: without PATH) and the shared-filesystem scrun.lua, whose hooks log.
def _guide_oci_conf() -> str:
    """The crun oci.conf of Slurm's containers guide for the release under test (run
    mode, with EnvExclude and RunTimeEnvExclude), as the corpus of the import test
    writes it out; the latest release's for a release the corpus has not."""
    corpus = REPO / "tests" / "unit" / "site_corpus" / "oci"
    release = os.environ.get("SCRUN_TEST_SLURM", "")
    path = corpus / f"{release}-crun-run.conf"
    return (path if path.exists() else corpus / "26.05-crun-run.conf").read_text()


CONFIGS: list[tuple[str, str, Callable[[], str]]] = [
    ("cluster", "the test cluster's oci.conf", (STATE / "oci.conf").read_text),
    ("guide", "the guide's crun oci.conf (EnvExclude, RunTimeEnvExclude)", _guide_oci_conf),
]


def versus_conf(work: Path, key: str = "cluster") -> Path:
    """One configuration directory per site configuration (CONFIGS), for every row and
    both runtimes (made once): the cluster's slurm.conf, that configuration's oci.conf
    (plus SrunPath: Slurm's scrun starts srun without PATH) and the shared-filesystem
    scrun.lua, whose hooks only log (Slurm's scrun needs one; sites have one)."""
    conf = work / ("vconf" if key == "cluster" else f"vconf-{key}")
    if (conf / "slurm.conf").exists():
        return conf
    conf.mkdir()
    for name in ("slurm.conf", "cgroup.conf"):
        if (STATE / name).exists():
            shutil.copy(STATE / name, conf / name)
    text = next(fn for k, _, fn in CONFIGS if k == key)()
    (conf / "oci.conf").write_text(text.rstrip("\n") + f"\nSrunPath={SLURM_BIN / 'srun'}\n")
    shutil.copy(REPO / "lua" / "scrun.lua", conf / "scrun.lua")
    for kind, exe in (("py", SCRUN), ("slurm", str(SLURM_BIN / "scrun"))):
        # podman passes no --root; Slurm's scrun will not guess one as root
        (conf / f"runtime-{kind}").write_text(
            f"#!/bin/sh\n[ -n \"$XDG_RUNTIME_DIR\" ] || set -- --root {conf}/root-{kind} \"$@\"\n"
            f"exec {exe} -f {conf}/slurm.conf \"$@\"\n")
        os.chmod(conf / f"runtime-{kind}", 0o755)
    (conf / "containers.conf").write_text(
        '[containers]\nnetns = "none"\n\n[engine.runtimes]\n'
        f'slurm = ["{conf}/runtime-py"]\nslurm-scrun = ["{conf}/runtime-slurm"]\n')
    subprocess.run(["chmod", "-R", "a+rX", str(conf)], check=True)
    return conf


def private_dockerd(conf: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """A dockerd of our own with both runtimes registered (the engines' dockerd keeps
    the documented configuration)."""
    ddir = STATE / "bench-docker"
    ddir.mkdir(exist_ok=True)
    (ddir / "daemon.json").write_text(json.dumps({"runtimes": {
        name: {"path": exe, "runtimeArgs": ["-f", f"{conf}/slurm.conf"]}
        for name, exe in (("slurm", SCRUN), ("slurm-scrun", str(SLURM_BIN / "scrun")))}}))
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "DOCKER_HOST": f"unix://{ddir}/docker.sock"}
    with open(ddir / "dockerd.log", "wb") as log:
        proc = subprocess.Popen(
            ["dockerd", "--config-file", str(ddir / "daemon.json"), "--host",
             env["DOCKER_HOST"], "--data-root", str(ddir / "data"), "--exec-root",
             str(ddir / "exec"), "--pidfile", str(ddir / "docker.pid"), "--iptables=false",
             "--ip6tables=false", "--bridge=none", "--storage-driver=overlay2"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 60
    while subprocess.run(["docker", "version"], env=env, capture_output=True,
                         timeout=30, check=False).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"private dockerd: {(ddir / 'dockerd.log').read_text()[-500:]}")
        time.sleep(0.2)
    image = "scrun-busybox"
    if subprocess.run(["docker", "image", "inspect", image], env=env, capture_output=True,
                      timeout=60, check=False).returncode != 0:
        subprocess.run(["docker", "import", str(STATE / "engines" / "busybox.tar"), image],
                       env=env, check=True, capture_output=True, timeout=120)
    return proc, env


def side_by_side(what: str, exes: dict[str, str], fn: Callable[[str, str], None],
                 prefix: str, runs: int, on_hang: Callable[[str], None],
                 counter: Iterator[int]) -> dict[str, object]:
    """One row: `fn(who, cid)` timed `runs` times for each runtime of `exes`."""
    res: dict[str, object] = {"name": what}
    for who in exes:
        tag = f"{prefix}{who[0]}"

        def cid(tag: str = tag) -> str:
            return f"{tag}{next(counter)}"
        samples, hangs = guarded(partial(fn, who), runs, cid, on_hang)
        res[who] = {"median_s": statistics.median(samples) if samples else None,
                    "min_s": min(samples, default=None),
                    "max_s": max(samples, default=None), "n": len(samples),
                    "hangs": hangs}
    return res


def _config_rows(pw: pwd.struct_passwd, env: dict[str, str], work: Path, n: int,
                 counter: Iterator[int], exes: dict[str, str], conf: Path,
                 label: str) -> list[dict[str, object]]:
    """The lifecycle, state and anchor RSS rows with the configuration in `conf`."""
    out: list[dict[str, object]] = []
    tag = conf.name

    def base(who: str) -> list[str]:
        return as_user(pw, [exes[who], "-f", f"{conf}/slurm.conf", "--root",
                            f"{work}/vroot-{tag}-{'py' if who == 'scrun-py' else 'slurm'}"])

    def create(who: str, cid: str, bundle: str) -> int:
        """`create` through `who`, bounded by HANG_S; the anchor's pid."""
        return create_bounded(base(who), env, work / bundle, work / f"{cid}.pid", cid)

    def lifecycle(who: str, cid: str) -> None:
        anchor = create(who, cid, "true")
        call([*base(who), "start", cid], env)
        wait_gone(anchor, f"anchor {cid}")
        call([*base(who), "delete", cid], env)

    out.append(side_by_side(f"create→start→exit→delete (true), {label}", exes, lifecycle,
                            "vl", n, lambda cid: end_container(cid, env), counter))

    # state of one running container, and its anchor's peak RSS
    state: dict[str, dict[str, object]] = {}
    rss: dict[str, dict[str, object]] = {}
    for who in exes:
        cid = f"vs{who[0]}{next(counter)}"
        try:
            anchor = create(who, cid, "sleep")
            call([*base(who), "start", cid], env)
            state_argv = [*base(who), "state", cid]

            def one_state(_cid: str, argv: list[str] = state_argv) -> None:
                call(argv, env)
            samples, hangs = guarded(one_state, n * 3, partial(str, cid),
                                     lambda c: end_container(c, env))
            time.sleep(1)
            state[who] = {"median_s": statistics.median(samples) if samples else None,
                          "min_s": min(samples, default=None),
                          "max_s": max(samples, default=None), "n": len(samples),
                          "hangs": hangs}
            rss[who] = {"rss_mb": round(rss_kb(anchor) / 1024, 1), "hangs": 0}
            call([*base(who), "delete", "--force", cid], env)
            wait_gone(anchor, f"anchor {cid}")
        except Hang:
            state.setdefault(who, {"median_s": None, "n": 0, "hangs": 1})
            rss.setdefault(who, {"rss_mb": None, "hangs": 1})
            end_container(cid, env)
    out.append({"name": f"state (one running container), {label}", **state})
    out.append({"name": f"anchor peak RSS (one running container), {label}", **rss})
    return out


def versus_rows(pw: pwd.struct_passwd, env: dict[str, str], work: Path, n: int,
                counter: Iterator[int], engines: bool = True) -> list[dict[str, object]]:
    """scrun-py and Slurm's scrun side by side, same configuration, same bundles: the
    lifecycle, state and anchor RSS rows once per site configuration (CONFIGS), the
    engines' rows with the cluster's."""
    exes = {"scrun-py": SCRUN, "Slurm's scrun": str(SLURM_BIN / "scrun")}
    out: list[dict[str, object]] = []
    for key, label, _ in CONFIGS:
        out += _config_rows(pw, env, work, n, counter, exes, versus_conf(work, key), label)
    conf = versus_conf(work)
    if not engines:
        return out

    # the engines as root, `true` in the test image, same configuration for both
    podman_env = {"PATH": env["PATH"].replace(f"{VENV}/bin:", ""), "HOME": "/root",
                  "CONTAINERS_CONF": f"{conf}/containers.conf"}
    podman = ["podman", "run", "--rm", "--network", "none", *PODMAN_CRUN_ULIMITS, "--runtime"]

    def engine_run(tool: str, tool_env: dict[str, str], who: str, cid: str) -> None:
        """`run --rm true`; the engine writes its container id to CID.cid (for a hang)."""
        argv = ([*podman] if tool == "podman"
                else ["docker", "run", "--rm", "--network", "none", "--runtime"])
        image = "localhost/scrun-busybox" if tool == "podman" else "scrun-busybox"
        call([*argv, "slurm" if who == "scrun-py" else "slurm-scrun", "--cidfile",
              f"{work}/{cid}.cid", image, "true"], tool_env)

    def engine_hang(tool: str, tool_env: dict[str, str], cid: str) -> None:
        """End the hung anchor (its title is the engine's id), its job, the container."""
        try:
            engine_id = Path(f"{work}/{cid}.cid").read_text().strip()
        except OSError:
            return
        end_container(engine_id, env)
        subprocess.run([tool, "rm", "-f", engine_id], env=tool_env, capture_output=True,
                       timeout=HANG_S, check=False)

    out.append(side_by_side("podman run --rm true (root)", exes,
                            partial(engine_run, "podman", podman_env), "vp", n,
                            partial(engine_hang, "podman", podman_env), counter))
    dockerd, docker_env = private_dockerd(conf)
    docker_env["PATH"] = podman_env["PATH"]
    try:
        out.append(side_by_side("docker run --rm true (root)", exes,
                                partial(engine_run, "docker", docker_env), "vd", n,
                                partial(engine_hang, "docker", docker_env), counter))
        subprocess.run(["docker", "rm", "-f", *subprocess.run(
            ["docker", "ps", "-aq"], env=docker_env, capture_output=True, text=True,
            check=False).stdout.split()], env=docker_env, capture_output=True, check=False)
    finally:
        dockerd.terminate()
        dockerd.wait(timeout=60)
    return out


def _cell(value: object, d: dict[str, object], unit: str) -> str:
    if not isinstance(value, float):
        return "-"
    text = f"{value * 1000:.0f} ms" if unit == "ms" else f"{value:.1f} MB"
    return text + (f" (n={d['n']})" if "n" in d else "")


def print_versus(rows: list[dict[str, object]]) -> None:
    print()
    print("| what | scrun-py | Slurm's scrun | scrun-py / Slurm's | Slurm's scrun hangs |")
    print("|---|---|---|---|---|")
    for r in rows:
        py, sl = r["scrun-py"], r["Slurm's scrun"]
        assert isinstance(py, dict) and isinstance(sl, dict)
        key, unit = ("median_s", "ms") if "median_s" in py else ("rss_mb", "MB")
        a, b = py.get(key), sl.get(key)
        ratio = f"{a / b:.2f}x" if isinstance(a, float) and isinstance(b, float) and b else "-"
        runs = int(str(sl.get("n", 1))) + int(str(sl["hangs"]))
        print(f"| {r['name']} | {_cell(a, py, unit)} | {_cell(b, sl, unit)} | {ratio} |"
              f" {sl['hangs']} of {runs} |")


def lifecycles(pw: pwd.struct_passwd, env: dict[str, str], base: list[str], work: Path,
               n: int, counter: Iterator[int]) -> dict[str, object]:
    """n lifecycles of `true`, each call bounded by HANG_S: timings of the good ones, the
    failures (a non-zero exit, a missing pid file) and the hangs (then cleaned up)."""
    samples: list[float] = []
    failures: list[str] = []
    hangs: list[str] = []
    for _ in range(n):
        cid = f"L{next(counter)}"
        t = time.perf_counter()
        try:
            anchor = create_bounded(base, env, work / "true", work / f"{cid}.pid", cid)
            call([*base, "start", cid], env)
            wait_gone(anchor, f"anchor {cid}")
            call([*base, "delete", cid], env)
        except Hang as exc:
            hangs.append(str(exc))
        except (RuntimeError, OSError, ValueError) as exc:
            failures.append(f"{cid}: {exc}"[:300])
        else:
            samples.append(time.perf_counter() - t)
            continue
        subprocess.run([*base, "delete", "--force", cid], env=env, capture_output=True,
                       timeout=HANG_S, check=False)
    return {"n": n, "ok": len(samples), "failures": len(failures), "hangs": len(hangs),
            "median_s": statistics.median(samples) if samples else None,
            "min_s": min(samples, default=None), "max_s": max(samples, default=None),
            "problems": failures + hangs}


def memory(pw: pwd.struct_passwd, env: dict[str, str], base: list[str], work: Path,
           count: int, prefix: str) -> dict[str, object]:
    """Peak RSS (VmHWM), RSS and PSS of each anchor with `count` running containers."""
    pids: dict[str, int] = {}
    try:
        for i in range(count):
            cid = f"{prefix}{i}"
            pids[cid] = create_bounded(base, env, work / "sleep", work / f"{cid}.pid", cid)
            call([*base, "start", cid], env)
        time.sleep(1)
        hwm = [rss_kb(pid) for pid in pids.values()]
        rss = [_proc_kb(f"/proc/{pid}/status", "VmRSS:") for pid in pids.values()]
        pss = [pss_kb(pid) for pid in pids.values()]
    finally:
        for cid in pids:
            subprocess.run([*base, "delete", "--force", cid], env=env, capture_output=True,
                           timeout=HANG_S, check=False)
    mb = [round(k / 1024, 1) for k in hwm]
    return {"containers": count, "peak_rss_mb": mb,
            "peak_rss_mb_median": statistics.median(mb) if mb else None,
            "peak_rss_mb_max": max(mb, default=None),
            "rss_mb_median": round(statistics.median(rss) / 1024, 1) if rss else None,
            "pss_mb_median": round(statistics.median(pss) / 1024, 1) if pss else None,
            "pss_mb_total": round(sum(pss) / 1024, 1)}


def concurrent_runs(pw: pwd.struct_passwd, env: dict[str, str], root: str, work: Path,
                    count: int) -> dict[str, object]:
    """`count` `scrun-py run` of `true` started at once: wall time, failures, and the CPU
    they cost on this (login) node: our processes with salloc and srun (getrusage of the
    waited-for children) and, apart, slurmctld's and slurmd's."""
    cpu0, daemons0 = children_cpu_s(), daemons_cpu_s()
    t = time.perf_counter()
    procs = [subprocess.Popen(as_user(pw, [SCRUN, "--root", root, "run", "--bundle",
                                           str(work / "true"), f"c{i}"]), env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for i in range(count)]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=900))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    wall = time.perf_counter() - t
    cpu, daemons = children_cpu_s() - cpu0, daemons_cpu_s() - daemons0
    return {"n": count, "wall_s": round(wall, 2), "failures": sum(1 for c in codes if c),
            "cpu_s_per_container": round(cpu / count, 3),
            "slurm_daemons_cpu_s_per_container": round(daemons / count, 3)}


TARGETS = (("lifecycle", 2.0, "x Slurm's scrun"), ("state", 2.5, "x Slurm's scrun"),
           ("--version", 25.0, "ms"), ("rss", 15.0, "MB"))
ENGINE_EXTRA_S = 0.45  # run --rm of an image that already ran: at most the plain runtime's + this


def engine_targets(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """`run --rm` of an image that already ran: at most the plain runtime + ENGINE_EXTRA_S,
    and no rootfs copy (every run staged from an existing cache entry)."""
    by_name = {r["name"]: r for r in rows}
    out: list[dict[str, object]] = []
    for r in rows:
        cache, floor = r.get("cache"), by_name.get(str(r["floor"]))
        if not isinstance(cache, dict) or floor is None:
            continue
        a, b = float(str(r["median_s"])), float(str(floor["median_s"]))
        copied = cache["entries_made"] != 0 or cache["uses_added"] != r["n"]
        out.append({"target": f"{r['name']} ≤ {floor['name']} + {ENGINE_EXTRA_S:.2f} s,"
                              " no rootfs copy",
                    "measured": f"{a * 1000:.0f} ms vs {b * 1000:.0f} ms = "
                                f"+{(a - b) * 1000:.0f} ms; {cache['uses_added']} stage_ins"
                                f" from the cache in {r['n']} runs, {cache['entries_made']}"
                                " entries made",
                    "met": a - b <= ENGINE_EXTRA_S and not copied})
    return out


def print_target_table(targets: list[dict[str, object]]) -> None:
    print()
    print("| target | measured | met |")
    print("|---|---|---|")
    for t in targets:
        met = {True: "yes", False: "no", None: "-"}[t["met"]]  # type: ignore[index]
        print(f"| {t['target']} | {t['measured']} | {met} |")


def print_targets(rows: list[dict[str, object]], versus: list[dict[str, object]],
                  life: dict[str, object], mem: list[dict[str, object]],
                  conc: dict[str, object]) -> list[dict[str, object]]:
    """The issue's targets, each with what this run measured."""
    out: list[dict[str, object]] = []

    def add(target: str, measured: str, met: bool | None) -> None:
        out.append({"target": target, "measured": measured, "met": met})

    for _, label, _ in CONFIGS:
        vs = {str(r["name"]).split(" ")[0]: r for r in versus
              if str(r["name"]).endswith(f", {label}")}
        for key, name in (("lifecycle", "create→start→exit→delete"), ("state", "state")):
            r = vs.get(name)
            py = r and r["scrun-py"]
            sl = r and r["Slurm's scrun"]
            a = py.get("median_s") if isinstance(py, dict) else None
            b = sl.get("median_s") if isinstance(sl, dict) else None
            limit = dict((k, v) for k, v, _ in TARGETS)[key]
            what = f"{key} ≤ {limit}x Slurm's scrun, {label}"
            if isinstance(a, float) and isinstance(b, float) and b:
                add(what, f"{a * 1000:.0f} ms vs {b * 1000:.0f} ms = {a / b:.2f}x",
                    a / b <= limit)
            else:
                add(what, "no Slurm scrun in this release", None)
    version = next((r for r in rows if r["name"] == "scrun-py --version"), None)
    if version is not None:
        ms = float(str(version["median_s"])) * 1000
        add("--version ≤ 25 ms", f"{ms:.0f} ms", ms <= 25)
    add("lifecycles: 0 failures or hangs",
        f"{life['failures']} failures, {life['hangs']} hangs in {life['n']}",
        life["failures"] == 0 and life["hangs"] == 0)
    for m in mem:
        peak = m["peak_rss_mb_max"]
        add(f"anchor peak RSS ≤ 15 MB ({m['containers']} running)",
            f"median {m['peak_rss_mb_median']} MB, max {peak} MB; PSS median "
            f"{m['pss_mb_median']} MB", isinstance(peak, float) and peak <= 15)
    add(f"{conc['n']} concurrent containers, 0 failures",
        f"{conc['failures']} failures, {conc['wall_s']} s, {conc['cpu_s_per_container']} "
        f"CPU s per container (+ {conc['slurm_daemons_cpu_s_per_container']} s slurmctld/"
        "slurmd)", conc["failures"] == 0)
    out += engine_targets(rows)
    print_target_table(out)
    return out


def slurm_version(env: dict[str, str]) -> str:
    return subprocess.run(["srun", "--version"], capture_output=True, text=True, env=env,
                          check=False).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10, help="runs per timed row")
    ap.add_argument("--lifecycles", type=int, default=100,
                    help="lifecycles counted for failures and hangs")
    ap.add_argument("--many", type=int, default=50,
                    help="containers running at once for the memory row")
    ap.add_argument("--concurrent", type=int, default=500,
                    help="`scrun-py run` started at once")
    ap.add_argument("--skip-engines", action="store_true",
                    help="no podman/docker rows, `docker exec` included (both tables)")
    ap.add_argument("--versus-only", action="store_true",
                    help="only the rows against Slurm's own scrun")
    ap.add_argument("--engines-only", action="store_true",
                    help="only the podman/docker rows of the main table, `docker exec` "
                         "included (no results file)")
    ap.add_argument("--backends-only", action="store_true",
                    help="only the Slurm backends side by side (bench/backends.py), "
                         "written to results/backends.json")
    ap.add_argument("--install", choices=("site", "venv"), default="site",
                    help="site (the default): pip-install this checkout as the test user "
                         "into a fresh virtualenv, as a site does (bench/site_install.py); "
                         "venv: the virtualenv SCRUN_TEST_VENV names (the test one)")
    opts = ap.parse_args()
    pw = pwd.getpwnam(USER)
    if opts.install == "site":
        import site_install

        venv = site_install.make(pw)
        # again, with the module's paths (VENV, SCRUN) naming the new virtualenv
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:], "--install",
                                   "venv"], {**os.environ, "SCRUN_TEST_VENV": str(venv),
                                             "SCRUN_BENCH_BACKENDS_SCRUN": SCRUN})
    print(f"[bench] scrun-py of {VENV}", flush=True)
    env = user_env(pw)
    work = Path(tempfile.mkdtemp(prefix="scrun-bench-", dir="/tmp"))
    atexit.register(shutil.rmtree, work, True)  # also when a row fails
    os.chmod(work, 0o755)
    # podman runs the runtime in podman's working directory: a scrun_py package found
    # there must never be the one that runs
    os.chdir(work)
    make_bundle(work / "true", ["true"])
    make_bundle(work / "sleep", ["sleep", "600"])
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", str(work)], check=True)
    # every row runs with the site's configuration: the cluster's slurm.conf and oci.conf
    # beside a scrun.lua whose hooks log (lua/scrun.lua), as a site has
    env["SLURM_CONF"] = str(versus_conf(work) / "slurm.conf")
    root = str(work / "root")
    rows: list[dict[str, object]] = []
    counter = iter(range(10**9))

    def add(name: str, samples: list[float], floor: str | None) -> None:
        rows.append(timing(name, samples, floor))

    def crun_run() -> None:
        cid = f"b{next(counter)}"
        run(as_user(pw, ["crun", "--rootless=true", f"--root={work}/crunstate", "run",
                         "--bundle", str(work / "true"), cid]), env)

    def srun_container() -> None:
        run(as_user(pw, ["srun", f"--container={work / 'true'}", "true"]), env)

    base = as_user(pw, [SCRUN, "--root", root])

    def lifecycle() -> None:
        cid = f"l{next(counter)}"
        anchor = create_bounded(base, env, work / "true", work / f"{cid}.pid", cid)
        run([*base, "start", cid], env)
        wait_gone(anchor, f"anchor {cid}")
        run([*base, "delete", cid], env)

    def scrun_run() -> None:
        cid = f"r{next(counter)}"
        run(as_user(pw, [SCRUN, "--root", root, "run", "--bundle", str(work / "true"), cid]),
            env)

    if opts.engines_only:
        rows = engine_rows(pw, opts.n) + exec_rows(opts.n)
        print_rows(rows)
        print_target_table(engine_targets(rows))
        shutil.rmtree(work, ignore_errors=True)
        return

    if opts.backends_only:
        import backends

        by_backend = backends.rows(sys.modules[__name__], pw, env, work, opts.n, counter)
        backends.print_rows(by_backend)
        (Path(__file__).parent / "results" / "backends.json").write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d"), "slurm": slurm_version(env),
             "backends": by_backend}, indent=2))
        shutil.rmtree(work, ignore_errors=True)
        return

    if opts.versus_only:
        if not slurm_scrun():
            raise SystemExit(f"no Slurm scrun in {SLURM_BIN}")
        versus = versus_rows(pw, env, work, opts.n, counter, not opts.skip_engines)
        print_versus(versus)
        (Path(__file__).parent / "results" / "versus.json").write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d"), "versus_slurm_scrun": versus}, indent=2))
        shutil.rmtree(work, ignore_errors=True)
        return

    add("crun run true (OCI floor)", timed(crun_run, opts.n), None)
    add("srun --container true (Slurm floor)", timed(srun_container, opts.n), None)
    add("scrun-py create→start→exit→delete", timed(lifecycle, opts.n),
        "srun --container true (Slurm floor)")
    add("scrun-py run", timed(scrun_run, opts.n), "srun --container true (Slurm floor)")

    if not opts.skip_engines:
        rows += engine_rows(pw, opts.n) + exec_rows(opts.n)

    # short commands against one running container
    create_bounded(base, env, work / "sleep", work / "s.pid", "s")
    run([*base, "start", "s"], env)
    subprocess.run(as_user(pw, ["crun", "--rootless=true", f"--root={work}/crunstate", "create",
                                "--bundle", str(work / "sleep"), "cs"]), env=env, check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    add("crun state", timed(lambda: run(as_user(pw, ["crun", "--rootless=true",
                                                     f"--root={work}/crunstate", "state",
                                                     "cs"]), env), opts.n * 3), None)
    add("scrun-py state", timed(lambda: run([*base, "state", "s"], env), opts.n * 3),
        "crun state")
    add("scrun-py --version", timed(lambda: run(as_user(pw, [SCRUN, "--version"]), env),
                                    opts.n * 3), "crun state")
    add("scrun-py kill (SIGWINCH, running)",
        timed(lambda: run([*base, "kill", "s", "WINCH"], env), opts.n), "crun state")
    run([*base, "delete", "--force", "s"], env)
    subprocess.run(as_user(pw, ["crun", "--rootless=true", f"--root={work}/crunstate", "delete",
                                "--force", "cs"]), env=env, check=False)

    life = lifecycles(pw, env, base, work, opts.lifecycles, counter)
    mem = [memory(pw, env, base, work, 1, "m1-"),
           memory(pw, env, base, work, opts.many, "mm-")]
    conc = concurrent_runs(pw, env, root, work, opts.concurrent)
    versus = (versus_rows(pw, env, work, opts.n, counter, not opts.skip_engines)
              if slurm_scrun() else [])
    import backends

    by_backend = backends.rows(sys.modules[__name__], pw, env, work, opts.n, counter)

    print_rows(rows)
    med = life["median_s"]
    print(f"| {life['n']} lifecycles (every call bounded by {HANG_S} s) |"
          f" {float(med) * 1000:.0f} ms | | | {life['ok']} |"  # type: ignore[arg-type]
          f" failures: {life['failures']}, hangs: {life['hangs']} |" if med is not None else
          f"| {life['n']} lifecycles | - | | | 0 | failures: {life['failures']}, hangs:"
          f" {life['hangs']} |")
    for m in mem:
        print(f"| anchor memory ({m['containers']} running, each) |"
              f" peak RSS {m['peak_rss_mb_median']} MB (max {m['peak_rss_mb_max']}) |"
              f" RSS {m['rss_mb_median']} MB | PSS {m['pss_mb_median']} MB |"
              f" {m['containers']} | PSS total {m['pss_mb_total']} MB |")
    print(f"| {conc['n']} concurrent `scrun-py run` | {conc['wall_s']} s total | | | 1 |"
          f" failures: {conc['failures']}; CPU {conc['cpu_s_per_container']} s per container"
          f" (slurmctld+slurmd {conc['slurm_daemons_cpu_s_per_container']} s) |")
    if versus:
        print_versus(versus)
    backends.print_rows(by_backend)
    targets = print_targets(rows, versus, life, mem, conc)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "slurm": slurm_version(env),
        "rows": rows, "lifecycles": life, "memory": mem, "concurrent": conc,
        "versus_slurm_scrun": versus, "backends": by_backend, "targets": targets,
    }, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
