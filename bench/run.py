"""Side-by-side benchmark: scrun-py against its floors, measured in one run.

    sudo scripts/cluster.sh up && sudo /opt/scrun-py/venv/bin/python bench/run.py [-n N]

Prints a Markdown table (median, min, max, ratio to the floor) and writes
bench/results/latest.json.  Runs as the ordinary test user, like a real site; the
`podman run --rm` / `docker run --rm` rows run the engines of `scripts/engines.sh` as root,
each against the same command with its plain runtime (crun, runc).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

STATE = Path(os.environ.get("SCRUN_TEST_STATE", "/var/lib/scrun-py-test"))
VENV = Path(os.environ.get("SCRUN_TEST_VENV", "/opt/scrun-py/venv"))
USER = os.environ.get("SCRUN_TEST_USER", "scruntest")
SCRUN = str(VENV / "bin" / "scrun-py")
APPLETS = ("sh", "true", "sleep", "echo")
ENGINES_SH = Path(__file__).resolve().parents[1] / "scripts" / "engines.sh"
# podman (root) asks crun for nofile=1048576 and a large nproc; without CAP_SYS_RESOURCE
# crun's setrlimit fails, and conmon's own nproc hard limit is 32768 here
PODMAN_CRUN_ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")


def user_env(pw: pwd.struct_passwd) -> dict[str, str]:
    return {"PATH": f"{VENV}/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "USER": pw.pw_name,
            "SLURM_CONF": str(STATE / "slurm.conf"), "XDG_RUNTIME_DIR": f"/run/user/{pw.pw_uid}"}


def as_user(pw: pwd.struct_passwd, argv: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "--",
            *argv]


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
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/root",
           "LANG": "C.UTF-8"}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key] = value
    return env


def rss_kb(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--concurrent", type=int, default=50)
    opts = ap.parse_args()
    pw = pwd.getpwnam(USER)
    env = user_env(pw)
    work = Path(tempfile.mkdtemp(prefix="scrun-bench-", dir="/tmp"))
    os.chmod(work, 0o755)
    make_bundle(work / "true", ["true"])
    make_bundle(work / "sleep", ["sleep", "600"])
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", str(work)], check=True)
    root = str(work / "root")
    rows: list[dict[str, object]] = []
    counter = iter(range(10**9))

    def add(name: str, samples: list[float], floor: str | None) -> None:
        rows.append({"name": name, "median_s": statistics.median(samples),
                     "min_s": min(samples), "max_s": max(samples), "n": len(samples),
                     "floor": floor})

    def crun_run() -> None:
        cid = f"b{next(counter)}"
        run(as_user(pw, ["crun", "--rootless=true", f"--root={work}/crunstate", "run",
                         "--bundle", str(work / "true"), cid]), env)

    def srun_container() -> None:
        run(as_user(pw, ["srun", f"--container={work / 'true'}", "true"]), env)

    def lifecycle() -> None:
        cid = f"l{next(counter)}"
        base = as_user(pw, [SCRUN, "--root", root])
        proc = subprocess.Popen([*base, "create", "--bundle", str(work / "true"),
                                 "--pid-file", f"{work}/{cid}.pid", cid], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        proc.wait()
        run([*base, "start", cid], env)
        pid = int(Path(f"{work}/{cid}.pid").read_text())
        while Path(f"/proc/{pid}").exists() and "Z" not in Path(
                f"/proc/{pid}/stat").read_text().split(") ")[1][:1]:
            time.sleep(0.002)
        run([*base, "delete", cid], env)

    def scrun_run() -> None:
        cid = f"r{next(counter)}"
        run(as_user(pw, [SCRUN, "--root", root, "run", "--bundle", str(work / "true"), cid]),
            env)

    add("crun run true (OCI floor)", timed(crun_run, opts.n), None)
    add("srun --container true (Slurm floor)", timed(srun_container, opts.n), None)
    add("scrun-py create→start→exit→delete", timed(lifecycle, opts.n),
        "srun --container true (Slurm floor)")
    add("scrun-py run", timed(scrun_run, opts.n), "srun --container true (Slurm floor)")

    # the engines as root, `true` in the test image; only the runtime differs
    eng = engine_env()
    image = eng.get("SCRUN_TEST_IMAGE", "scrun-busybox")
    podman = ["podman", "run", "--rm", "--network", "none", *PODMAN_CRUN_ULIMITS]
    docker = ["docker", "run", "--rm", "--network", "none"]
    for what, argv, plain in (("podman run --rm", podman, "crun"),
                              ("docker run --rm", docker, "runc")):
        img = f"localhost/{image}" if argv[0] == "podman" else image
        base_row = f"{what} true ({plain}, root)"
        add(base_row, timed(partial(run, [*argv, "--runtime", plain, img, "true"], eng),
                            opts.n), None)
        add(f"{what} true (scrun-py, root)",
            timed(partial(run, [*argv, "--runtime", "slurm", img, "true"], eng), opts.n),
            base_row)

    # short commands against one running container
    base = as_user(pw, [SCRUN, "--root", root])
    proc = subprocess.Popen([*base, "create", "--bundle", str(work / "sleep"), "--pid-file",
                             f"{work}/s.pid", "s"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.wait()
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
    anchor = int(Path(f"{work}/s.pid").read_text())
    rss1 = rss_kb(anchor)
    run([*base, "delete", "--force", "s"], env)
    subprocess.run(as_user(pw, ["crun", "--rootless=true", f"--root={work}/crunstate", "delete",
                                "--force", "cs"]), env=env, check=False)

    # memory with 20 containers running at once
    many = [f"m{i}" for i in range(20)]
    pids: list[int] = []
    for cid in many:
        # the anchor keeps create's stdio (the container's): never a pipe we read to EOF
        with open(work / f"{cid}.err", "wb") as err:
            p = subprocess.Popen([*base, "create", "--bundle", str(work / "sleep"),
                                  "--pid-file", f"{work}/{cid}.pid", cid], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=err)
            p.wait()
        if p.returncode != 0:
            raise RuntimeError(f"create {cid}: {(work / f'{cid}.err').read_text()[-300:]}")
        pids.append(int(Path(f"{work}/{cid}.pid").read_text()))
        run([*base, "start", cid], env)
    time.sleep(1)
    rss20 = [rss_kb(pid) for pid in pids]
    for cid in many:
        run([*base, "delete", "--force", cid], env)

    # concurrency: N containers created and run at once
    def one(i: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(as_user(pw, [SCRUN, "--root", root, "run", "--bundle",
                                             str(work / "true"), f"c{i}"]), env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    t = time.perf_counter()
    procs = [one(i) for i in range(opts.concurrent)]
    failures = sum(1 for p in procs if p.wait(timeout=900) != 0)
    conc = time.perf_counter() - t

    by_name = {r["name"]: r for r in rows}
    print("| what | median | min | max | n | ratio to floor |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        floor = by_name.get(str(r["floor"])) if r["floor"] else None
        ratio = (f"{float(r['median_s']) / float(floor['median_s']):.2f}x {r['floor']}"  # type: ignore[arg-type]
                 if floor else "floor")
        r["ratio"] = ratio
        print(f"| {r['name']} | {float(r['median_s']) * 1000:.0f} ms |"  # type: ignore[arg-type]
              f" {float(r['min_s']) * 1000:.0f} ms | {float(r['max_s']) * 1000:.0f} ms |"  # type: ignore[arg-type]
              f" {r['n']} | {ratio} |")
    print(f"| anchor peak RSS (1 container) | {rss1 / 1024:.1f} MB | | | 1 | target 30 MB |")
    print(f"| anchor peak RSS (20 containers, each) | {statistics.median(rss20) / 1024:.1f} MB |"
          f" {min(rss20) / 1024:.1f} MB | {max(rss20) / 1024:.1f} MB | 20 |"
          f" total {sum(rss20) / 1024:.0f} MB |")
    print(f"| {opts.concurrent} concurrent `scrun-py run` | {conc:.1f} s total | | | 1 |"
          f" failures: {failures} |")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "slurm": subprocess.run(
            ["srun", "--version"], capture_output=True, text=True, env=env,
            check=False).stdout.strip(),
        "rows": rows, "anchor_rss_mb_1": round(rss1 / 1024, 1),
        "anchor_rss_mb_20": [round(r / 1024, 1) for r in rss20],
        "concurrent": {"n": opts.concurrent, "wall_s": round(conc, 2), "failures": failures},
    }, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
