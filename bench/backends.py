"""The Slurm backends side by side (SCRUN_PY_SLURM_BACKEND=cli, =pyslurm and =auto), in
one run of bench/run.py: the lifecycle, `state` and `kill` (WINCH) of a running container,
and that container's anchor memory (peak RSS, RSS, PSS) with each.

`cli` and `pyslurm` are forced, so a pyslurm that cannot be used fails its row instead of
measuring the CLI twice (`pyslurm` imports it before the job is requested); `auto` decides
in a thread while the job is allocated.  Each anchor's --log names the backend it chose
(counted per backend), and the pyslurm calls that fell back to the client commands are
counted.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import (
    BACKENDS_SCRUN,
    Ctx,
    Hang,
    as_user,
    create_bounded,
    run,
    slurm_version,
    wait_gone,
)
from bench.memory import proc_kb, pss_kb, rss_kb
from bench.stats import timed

BACKENDS = ("cli", "pyslurm", "auto")
CHOSEN = "slurm backend chosen"
FALLBACK = "pyslurm call failed, using the Slurm command instead"


def _records(log: Path) -> list[dict[str, Any]]:
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.startswith("{")]


def _ms(samples: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(samples), "min_s": min(samples),
            "max_s": max(samples), "n": len(samples)}


def one(ctx: Ctx, name: str) -> dict[str, object]:
    """The rows of one backend; {"backend": name, "error": ...} when it could not run."""
    benv = {**ctx.env, "SCRUN_PY_SLURM_BACKEND": name}
    work, n, counter = ctx.work, ctx.n, ctx.counter
    log = work / f"backend-{name}.log"
    base = as_user(ctx.pw, [BACKENDS_SCRUN, "--root", str(work / "root"), "--log", str(log),
                            "--log-format", "json"])

    def lifecycle() -> None:
        cid = f"bl{name}{next(counter)}"
        anchor = create_bounded(base, benv, work / "true", work / f"{cid}.pid", cid)
        run([*base, "start", cid], benv)
        wait_gone(anchor, f"anchor {cid}")
        run([*base, "delete", cid], benv)

    row: dict[str, object] = {"backend": name}
    try:
        row["lifecycle"] = _ms(timed(lifecycle, n))
        cid = f"bs{name}{next(counter)}"
        anchor = create_bounded(base, benv, work / "sleep", work / f"{cid}.pid", cid)
        try:
            run([*base, "start", cid], benv)
            row["state"] = _ms(timed(lambda: run([*base, "state", cid], benv), n * 3))
            row["kill"] = _ms(timed(lambda: run([*base, "kill", cid, "WINCH"], benv), n))
            time.sleep(1)
            row["anchor_peak_rss_mb"] = round(rss_kb(anchor) / 1024, 1)
            row["anchor_rss_mb"] = round(proc_kb(f"/proc/{anchor}/status", "VmRSS:") / 1024, 1)
            row["anchor_pss_mb"] = round(pss_kb(anchor) / 1024, 1)
        finally:
            run([*base, "delete", "--force", cid], benv, check=False)
    except (RuntimeError, OSError, ValueError, Hang) as exc:
        row["error"] = str(exc)[-300:]
    records = _records(log)
    chosen = [r.get("backend") for r in records if r.get("msg") == CHOSEN]
    row["anchors"] = len(chosen)
    row["chosen"] = {c: chosen.count(c) for c in sorted(set(map(str, chosen)))}
    row["fallbacks"] = sum(1 for r in records if r.get("msg") == FALLBACK)
    return row


def pyslurm_mismatch(env: dict[str, str]) -> str | None:
    """Why the pyslurm row cannot run here (None when it can): pyslurm X.Y builds
    against Slurm X.Y only, and forced it refuses another release."""
    python = str(Path(BACKENDS_SCRUN).parent / "python3")
    res = subprocess.run([python, "-c", "from importlib.metadata import version; "
                          "print(version('pyslurm'))"], capture_output=True, text=True,
                         check=False, timeout=60)
    have = res.stdout.strip()
    slurm = (slurm_version(env).split() or ["?"])[-1]
    if not have:
        return f"no pyslurm in {Path(python).parents[1]}"
    if have.split(".")[:2] != slurm.split(".")[:2]:
        return f"pyslurm {have} is for Slurm {'.'.join(have.split('.')[:2])}, not {slurm}"
    return None


def rows(ctx: Ctx) -> list[dict[str, object]]:
    print(f"[bench] backends: scrun-py of {Path(BACKENDS_SCRUN).parents[1]}", flush=True)
    out: list[dict[str, object]] = []
    for name in BACKENDS:
        why = pyslurm_mismatch(ctx.env) if name == "pyslurm" else None
        out.append({"backend": name, "skipped": why} if why else
                   one(ctx, name))
    return out


def _cell(row: dict[str, object], key: str) -> str:
    value = row.get(key)
    if isinstance(value, dict):
        return f"{value['median_s'] * 1000:.0f} ms"
    return "-" if value is None else f"{value} MB"


def print_rows(backend_rows: list[dict[str, object]]) -> None:
    print("\n| SCRUN_PY_SLURM_BACKEND | lifecycle | state | kill (WINCH) | anchor peak RSS |"
          " RSS | PSS | anchors chose | fallbacks |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in backend_rows:
        if "skipped" in r:
            print(f"| {r['backend']} | not measured: {r['skipped']} | | | | | | | |")
            continue
        if "error" in r:
            print(f"| {r['backend']} | failed: {r['error']} | | | | | | | |")
            continue
        print(f"| {r['backend']} | {_cell(r, 'lifecycle')} | {_cell(r, 'state')} |"
              f" {_cell(r, 'kill')} | {_cell(r, 'anchor_peak_rss_mb')} |"
              f" {_cell(r, 'anchor_rss_mb')} | {_cell(r, 'anchor_pss_mb')} |"
              f" {_chosen(r)} | {r['fallbacks']} |")


def _chosen(row: dict[str, object]) -> str:
    chosen = row.get("chosen")
    if not isinstance(chosen, dict) or not chosen:
        return "-"
    return ", ".join(f"{name} {count}" for name, count in chosen.items())
