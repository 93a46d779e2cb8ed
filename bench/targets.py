"""The performance targets, each with what this run measured (the last table)."""

from __future__ import annotations

from bench.stats import print_target_table
from bench.versus import CONFIGS

TARGETS = (("lifecycle", 2.0, "x Slurm's scrun"), ("state", 2.5, "x Slurm's scrun"),
           ("--version", 25.0, "ms"), ("rss", 15.0, "MB"))
ENGINE_EXTRA_S = 0.45  # run --rm of an image that already ran: at most the plain runtime's + this


def _target(target: str, measured: str, met: bool | None) -> dict[str, object]:
    return {"target": target, "measured": measured, "met": met}


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


def versus_targets(versus: list[dict[str, object]]) -> list[dict[str, object]]:
    """lifecycle and `state` against Slurm's scrun, per site configuration."""
    out: list[dict[str, object]] = []
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
                out.append(_target(what, f"{a * 1000:.0f} ms vs {b * 1000:.0f} ms = "
                                         f"{a / b:.2f}x", a / b <= limit))
            else:
                out.append(_target(what, "no Slurm scrun in this release", None))
    return out


def load_targets(life: dict[str, object], mem: list[dict[str, object]],
                 conc: dict[str, object]) -> list[dict[str, object]]:
    """No failure or hang in the lifecycles and the concurrent runs; small anchors."""
    out = [_target("lifecycles: 0 failures or hangs",
                   f"{life['failures']} failures, {life['hangs']} hangs in {life['n']}",
                   life["failures"] == 0 and life["hangs"] == 0)]
    for m in mem:
        peak = m["peak_rss_mb_max"]
        out.append(_target(f"anchor peak RSS ≤ 15 MB ({m['containers']} running)",
                           f"median {m['peak_rss_mb_median']} MB, max {peak} MB; PSS median "
                           f"{m['pss_mb_median']} MB", isinstance(peak, float) and peak <= 15))
    out.append(_target(
        f"{conc['n']} concurrent containers, 0 failures",
        f"{conc['failures']} failures, {conc['wall_s']} s, {conc['cpu_s_per_container']} "
        f"CPU s per container (+ {conc['slurm_daemons_cpu_s_per_container']} s slurmctld/"
        "slurmd)", conc["failures"] == 0))
    return out


def print_targets(rows: list[dict[str, object]], versus: list[dict[str, object]],
                  life: dict[str, object], mem: list[dict[str, object]],
                  conc: dict[str, object]) -> list[dict[str, object]]:
    """The performance targets, each with what this run measured."""
    out = versus_targets(versus)
    version = next((r for r in rows if r["name"] == "scrun-py --version"), None)
    if version is not None:
        ms = float(str(version["median_s"])) * 1000
        out.append(_target("--version ≤ 25 ms", f"{ms:.0f} ms", ms <= 25))
    out += load_targets(life, mem, conc)
    out += engine_targets(rows)
    print_target_table(out)
    return out
