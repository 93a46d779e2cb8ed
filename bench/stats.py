"""Timing, statistics and the Markdown tables the benches print."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from bench.common import Hang


def timed(fn: Callable[[], None], n: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def timing(name: str, samples: list[float], floor: str | None,
           **extra: object) -> dict[str, object]:
    """One row of the main table: the samples' median, min and max, its floor's name."""
    return {"name": name, "median_s": statistics.median(samples), "min_s": min(samples),
            "max_s": max(samples), "n": len(samples), "floor": floor, **extra}


def summary(samples: list[float]) -> dict[str, object]:
    """Median, min, max and count of samples that may be none (every run hung)."""
    return {"median_s": statistics.median(samples) if samples else None,
            "min_s": min(samples, default=None), "max_s": max(samples, default=None),
            "n": len(samples)}


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


def print_load_rows(life: dict[str, object], mem: list[dict[str, object]],
                    conc: dict[str, object], hang_s: int) -> None:
    """The main table's last rows: the lifecycles counted for failures and hangs (each
    call bounded by `hang_s`), the anchors' memory, the concurrent runs."""
    med = life["median_s"]
    print(f"| {life['n']} lifecycles (every call bounded by {hang_s} s) |"
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


def print_target_table(targets: list[dict[str, object]]) -> None:
    print()
    print("| target | measured | met |")
    print("|---|---|---|")
    for t in targets:
        met = {True: "yes", False: "no", None: "-"}[t["met"]]  # type: ignore[index]
        print(f"| {t['target']} | {t['measured']} | {met} |")


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
