"""Load: lifecycles counted for failures and hangs, and many `scrun-py run` started at
once with the CPU they cost."""

from __future__ import annotations

import os
import pwd
import resource
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import HANG_S, SCRUN, STATE, Hang, as_user, call, create_bounded, wait_gone


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


def lifecycles(env: dict[str, str], base: list[str], work: Path, n: int,
               counter: Iterator[int]) -> dict[str, object]:
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
