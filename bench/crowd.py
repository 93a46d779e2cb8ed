"""The login node's memory for many running containers: `count` containers of `sleep`
started one after another through scrun-py, then the same through Slurm's own scrun,
with the same site configuration (bench/versus.py `versus_conf`: the cluster's oci.conf
and the scrun.lua that logs).

What a container costs the login node is every process it keeps there: scrun-py's
anchor, its container's pid process (anchor/nsholder.py), salloc and the shell salloc
runs, the step's srun; Slurm's scrun's anchor and whatever it starts.  They are found
as the processes of each anchor's session (both anchors lead a session of their own)
and its descendants.  Reported for each runtime: the sum of PSS over them (shared
pages split between their users: the memory the login node gives them), of USS (their
private pages) and of RSS, per container and in all, and the processes by name."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench.common import (
    HANG_S,
    Ctx,
    Hang,
    anchor_of,
    as_user,
    call,
    create_bounded,
    end_container,
)
from bench.memory import proc_kb
from bench.versus import EXES


def _sessions_and_descendants(anchors: set[int]) -> set[int]:
    """The processes whose session is led by one of `anchors`, and their descendants."""
    parent: dict[int, int] = {}
    found: set[int] = set()
    mine = os.getsid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[pid] = int(fields[1])
        sid = int(fields[3])
        if sid in anchors and sid != mine:
            found.add(pid)
    for pid in parent:
        p = pid
        while p > 1:
            if p in anchors:
                found.add(pid)
                break
            p = parent.get(p, 0)
    return found


def _uss_kb(pid: int) -> int:
    return (proc_kb(f"/proc/{pid}/smaps_rollup", "Private_Clean:")
            + proc_kb(f"/proc/{pid}/smaps_rollup", "Private_Dirty:"))


def _comm(pid: int) -> str:
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"
    # an anchor's title carries its container's id
    return name.split(":", 1)[0] if name.startswith("scrun") else name


def measure(pids: set[int], count: int) -> dict[str, object]:
    pss_of = {p: proc_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids}
    pss = sum(pss_of.values())
    by_name: Counter[str] = Counter()
    for p, kb in pss_of.items():
        by_name[_comm(p)] += kb
    rss = sum(proc_kb(f"/proc/{p}/status", "VmRSS:") for p in pids)
    uss = sum(_uss_kb(p) for p in pids)
    return {"containers": count, "processes": len(pids),
            "by_name": dict(Counter(_comm(p) for p in pids).most_common()),
            "pss_mb_by_name": {k: round(v / 1024, 1) for k, v in by_name.most_common()},
            "pss_mb": round(pss / 1024, 1), "uss_mb": round(uss / 1024, 1),
            "rss_mb": round(rss / 1024, 1),
            "pss_per_container_mb": round(pss / 1024 / max(count, 1), 2),
            "rss_per_container_mb": round(rss / 1024 / max(count, 1), 2)}


def _crowd(ctx: Ctx, conf: Path, who: str, count: int) -> dict[str, object]:
    """`count` containers of sleep through `who`: the memory of those that run, the
    failures counted (a container that fails is deleted and the next one started)."""
    root = f"{ctx.work}/croot-{'py' if who == 'scrun-py' else 'slurm'}"
    base = as_user(ctx.pw, [EXES[who], "-f", f"{conf}/slurm.conf", "--root", root])
    made: list[str] = []
    anchors: set[int] = set()
    failures: list[str] = []
    out: dict[str, object] = {}
    t0 = time.monotonic()
    try:
        for i in range(count):
            cid = f"crowd{'p' if who == 'scrun-py' else 's'}{i}"
            made.append(cid)
            try:
                reported = create_bounded(base, ctx.env, ctx.work / "sleep",
                                          ctx.work / f"{cid}.pid", cid)
                call([*base, "start", cid], ctx.env)
            except (Hang, RuntimeError, OSError) as exc:  # OSError: no pid file
                failures.append(f"{cid}: {str(exc)[-160:]}")
                _delete(base, ctx, cid)
                continue
            anchors.add(anchor_of(base, cid, reported))
        start_s = time.monotonic() - t0
        time.sleep(2)
        found = _sessions_and_descendants(anchors)
        # containers whose processes were found (an anchor read as its pid process, the
        # record not yet written, is not): the per-container figures divide by these
        out.update(measure(found, len(anchors & found) or len(anchors)))
        out.update(asked=count, failed=len(failures), first_failures=failures[:3],
                   start_all_s=round(start_s, 1))
        return out
    finally:
        for cid in made:
            _delete(base, ctx, cid)
        left = _wait_gone(anchors)
        # anchors still there after `delete --force` and HANG_S (Slurm's scrun 24.11's
        # spin once its job is gone) are ended, so that the next rows run on idle CPUs
        for cid in made:
            end_container(cid, ctx.env)
        out["anchors_left_after_delete"] = left


def _delete(base: list[str], ctx: Ctx, cid: str) -> None:
    try:
        subprocess.run([*base, "delete", "--force", cid], env=ctx.env, capture_output=True,
                       timeout=HANG_S, check=False)
    except subprocess.TimeoutExpired:
        pass


def _wait_gone(pids: set[int]) -> int:
    """How many of `pids` are still there after HANG_S (0 as soon as none is)."""
    deadline = time.monotonic() + HANG_S
    while True:
        left = [p for p in pids if os.path.exists(f"/proc/{p}")]
        if not left or time.monotonic() >= deadline:
            return len(left)
        time.sleep(0.5)


def _resume_drained(env: dict[str, str]) -> list[str]:
    """The nodes a row left drained ("NODE: reason"; on 24.11 a step of Slurm's scrun
    that does not end with signals drains its node: Kill task failed), resumed so that
    the next row and the next run get them."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], env=env,
                         capture_output=True, text=True, timeout=60, check=False).stdout
    drained = []
    for line in sorted(set(out.splitlines())):
        node, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        if state.startswith("drain"):
            drained.append(f"{node}: {reason}")
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                           env=env, capture_output=True, timeout=60, check=False)
    return drained


def crowd_rows(ctx: Ctx, conf: Path, count: int) -> dict[str, object]:
    """The row: `count` running containers through each runtime, one runtime at a
    time (all of one ended before the other starts), and the ratio of their PSS per
    running container."""
    row: dict[str, object] = {"name": f"{count} running containers of sleep: login node "
                                      "memory (sum of PSS over their processes)"}
    before = _resume_drained(ctx.env)
    if before:
        print(f"[bench] nodes drained before the crowd rows, resumed: {'; '.join(before)}",
              file=sys.stderr)
    for who in EXES:
        row[who] = _crowd(ctx, conf, who, count)
        drained = _resume_drained(ctx.env)
        if drained and isinstance(row[who], dict):
            row[who]["nodes_drained"] = drained  # type: ignore[index]
    py, slurm = row["scrun-py"], row["Slurm's scrun"]
    # per running container: a runtime some of whose containers failed is compared on
    # those that run
    if (isinstance(py, dict) and isinstance(slurm, dict)
            and slurm.get("pss_per_container_mb") and py.get("pss_per_container_mb")):
        row["pss_ratio"] = round(float(py["pss_per_container_mb"])
                                 / float(slurm["pss_per_container_mb"]), 2)
    return row


def print_row(row: dict[str, object]) -> None:
    """The row as a Markdown table: one line per runtime."""
    print(f"\n{row['name']}\n")
    print("| runtime | running | processes | PSS in all | per container | USS in all "
          "| RSS in all | started in |")
    print("|---|---|---|---|---|---|---|---|")
    for who in EXES:
        got = row.get(who)
        if not isinstance(got, dict) or "pss_mb" not in got:
            print(f"| {who} | {got} |")
            continue
        print(f"| {who} | {got['containers']} of {got['asked']} ({got['failed']} failed) "
              f"| {got['processes']} {got['by_name']} | {got['pss_mb']} MB "
              f"| {got['pss_per_container_mb']} MB | {got['uss_mb']} MB | {got['rss_mb']} MB "
              f"| {got['start_all_s']} s |")
    if "pss_ratio" in row:
        print(f"\nPSS per running container, scrun-py to Slurm's scrun: {row['pss_ratio']}x")
    for who in EXES:
        got = row.get(who)
        left = got.get("anchors_left_after_delete") if isinstance(got, dict) else None
        if left:
            print(f"{who}: {left} anchors were still there {HANG_S} s after `delete "
                  "--force`; the bench ended them")
        drained = got.get("nodes_drained") if isinstance(got, dict) else None
        if drained:
            print(f"{who}: its row left nodes drained ({'; '.join(drained)}); the bench "
                  "resumed them")
