"""Memory per anchor: peak RSS (VmHWM), RSS and PSS of each anchor with one and with
many containers running."""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

from bench.common import HANG_S, anchor_of, call, create_bounded


def rss_kb(pid: int) -> int:
    """Peak resident set (VmHWM) of a process, in kB; 0 if it is gone."""
    return proc_kb(f"/proc/{pid}/status", "VmHWM:")


def pss_kb(pid: int) -> int:
    """Proportional set size (shared pages split between their users), in kB."""
    return proc_kb(f"/proc/{pid}/smaps_rollup", "Pss:")


def proc_kb(path: str, key: str) -> int:
    """The kB figure of the line of `path` (under /proc) that starts with `key`; 0 if
    there is none or the process is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def memory(env: dict[str, str], base: list[str], work: Path, count: int,
           prefix: str) -> dict[str, object]:
    """Peak RSS (VmHWM), RSS and PSS of each anchor with `count` running containers."""
    pids: dict[str, int] = {}
    try:
        for i in range(count):
            cid = f"{prefix}{i}"
            reported = create_bounded(base, env, work / "sleep", work / f"{cid}.pid", cid)
            pids[cid] = anchor_of(base, cid, reported)  # the anchor, not the pid process
            call([*base, "start", cid], env)
        time.sleep(1)
        hwm = [rss_kb(pid) for pid in pids.values()]
        rss = [proc_kb(f"/proc/{pid}/status", "VmRSS:") for pid in pids.values()]
        pss = [pss_kb(pid) for pid in pids.values()]
    finally:
        for cid in pids:
            subprocess.run([*base, "delete", "--force", cid], env=env, capture_output=True,
                           timeout=HANG_S, check=False)
    return _summary(count, hwm, rss, pss)


def _summary(count: int, hwm: list[int], rss: list[int], pss: list[int]) -> dict[str, object]:
    mb = [round(k / 1024, 1) for k in hwm]
    return {"containers": count, "peak_rss_mb": mb,
            "peak_rss_mb_median": statistics.median(mb) if mb else None,
            "peak_rss_mb_max": max(mb, default=None),
            "rss_mb_median": round(statistics.median(rss) / 1024, 1) if rss else None,
            "pss_mb_median": round(statistics.median(pss) / 1024, 1) if pss else None,
            "pss_mb_total": round(sum(pss) / 1024, 1)}
