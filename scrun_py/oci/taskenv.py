"""Give a container its task's Slurm variables, for slurmstepd releases that do not.

slurmstepd 22.05 writes one config.json per node for a container step, with the
*step's* environment: SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_GTIDS and
SLURMD_NODENAME are missing, so no task of a multi-node container job can tell which
rank it is (24.11 writes the task's environment; this helper then changes nothing).
The OCI runtime command knows the node (`%n`) and the local task id (`%t`), and the
rewritten config.json carries the step's layout (SLURM_STEP_NODELIST,
SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION), which is enough to work the rest out.
Use it in oci.conf in front of the runtime:

    RunTimeRun="exec python3 -m scrun_py.oci.taskenv %n %t %b -- crun … run --bundle %b …"

It adds the variables that are missing to `%b/config.json` (replaced atomically; the
step spool dir belongs to the job's user), then executes the runtime command in its
own place, so the runtime stays the step's task and receives Slurm's signals.  A value
already in config.json is never changed.  SLURM_PROCID is set only when the layout
says it for certain: block, cyclic and plane distributions, not arbitrary.  When it
cannot work something out it says so on stderr and runs the container anyway.

This file uses nothing but the standard library, so a node without scrun-py installed
can run it as `python3 /path/to/taskenv.py …`.  For that reason it imports nothing of
scrun-py's: its host list and tasks-per-node readers are its own, and slurm/parse.py
has the login node's (`expand_hostlist`, `max_tasks_per_node`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence

USAGE = "usage: taskenv NODE LOCAL_TASK_ID BUNDLE -- RUNTIME-COMMAND..."
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class LayoutError(ValueError):
    """The step layout in config.json does not say where this task is."""


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compact host list (`n[1-3,5],login`) as names, in order."""
    names: list[str] = []
    for item in _split_top(text):
        if "[" not in item:
            names.append(item)
            continue
        head, _, rest = item.partition("[")
        body, sep, tail = rest.partition("]")
        if not sep or "[" in tail:
            raise LayoutError(f"host list not understood: {text!r}")
        for part in body.split(","):
            m = _RANGE.match(part)
            if not m:
                raise LayoutError(f"host list not understood: {text!r}")
            lo, hi = m.group(1), m.group(2) or m.group(1)
            width = len(lo)
            names += [f"{head}{n:0{width}d}{tail}" for n in range(int(lo), int(hi) + 1)]
    return names


def _split_top(text: str) -> list[str]:
    """Split on the commas that are not inside brackets."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += (ch == "[") - (ch == "]")
        cur += ch
    items.append(cur)
    return [i for i in items if i]


def expand_counts(text: str) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE (`2(x3),1`) as one count per node."""
    counts: list[int] = []
    for part in text.split(","):
        m = _COUNT.match(part.strip())
        if not m:
            raise LayoutError(f"tasks per node not understood: {text!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def task_ids(counts: Sequence[int], distribution: str, plane_size: str = "") -> list[list[int]]:
    """Global task ids of each node, as Slurm lays the step out (block/cyclic/plane;
    srun gives the plane size as `plane=N` or in SLURM_DIST_PLANESIZE)."""
    kind = re.split("[:,]", distribution, maxsplit=1)[0].lower()
    ids: list[list[int]] = [[] for _ in counts]
    if all(c == 1 for c in counts) and kind != "arbitrary":
        return [[i] for i in range(len(counts))]
    if kind in ("", "block", "pack", "nopack", "unknown"):
        first = 0
        for i, c in enumerate(counts):
            ids[i] = list(range(first, first + c))
            first += c
        return ids
    if kind == "cyclic" or kind.startswith("plane"):
        size = 1
        if kind.startswith("plane"):
            _, _, value = kind.partition("=")
            value = value or plane_size
            size = int(value) if value.isdigit() else 0
            if size <= 0:
                raise LayoutError(f"distribution {distribution!r} has no plane size")
        task, total = 0, sum(counts)
        while task < total:
            for i, c in enumerate(counts):
                take = min(size, c - len(ids[i]))
                ids[i] += range(task, task + take)
                task += take
        return ids
    raise LayoutError(f"distribution {distribution!r}: the task's rank is not known")


def task_env(env: dict[str, str], node: str, local_id: int) -> dict[str, str]:
    """The task's variables that `env` (the step's) lacks."""
    nodes = expand_hostlist(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_NODELIST", ""))
    if node not in nodes:
        raise LayoutError(f"node {node} is not in the step's node list {nodes}")
    node_id = nodes.index(node)
    add = {"SLURMD_NODENAME": node, "SLURM_NODEID": str(node_id),
           "SLURM_LOCALID": str(local_id)}
    counts_text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "")
    counts = expand_counts(counts_text)
    if len(counts) != len(nodes):
        raise LayoutError(f"{len(nodes)} nodes but tasks per node {counts_text!r}")
    mine = task_ids(counts, env.get("SLURM_DISTRIBUTION", ""),
                    env.get("SLURM_DIST_PLANESIZE", ""))[node_id]
    if not 0 <= local_id < len(mine):
        raise LayoutError(f"local task {local_id} of {len(mine)} on {node}")
    add["SLURM_PROCID"] = str(mine[local_id])
    add["SLURM_GTIDS"] = ",".join(map(str, mine))
    return {k: v for k, v in add.items() if k not in env}


def _env_dict(entries: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in entries:
        key, _, value = entry.partition("=")
        out[key] = value
    return out


def rewrite_config(bundle: str, node: str, local_id: int) -> list[str]:
    """Add the missing variables to `bundle`/config.json; the names it added."""
    path = os.path.join(bundle, "config.json")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    process = config.setdefault("process", {})
    entries: list[str] = process.setdefault("env", [])
    env = _env_dict(entries)
    if "SLURM_PROCID" in env and "SLURM_NODEID" in env and "SLURM_LOCALID" in env:
        return []
    add = task_env(env, node, local_id)
    entries += [f"{k}={v}" for k, v in add.items()]
    fd, tmp = tempfile.mkstemp(prefix=".config.", suffix=".json", dir=bundle)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(config, fh)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return sorted(add)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 5 or argv[3] != "--" or not argv[1].isdigit():
        print(f"taskenv: {USAGE}", file=sys.stderr)
        return 1
    node, local_id, bundle, command = argv[0], int(argv[1]), argv[2], list(argv[4:])
    try:
        rewrite_config(bundle, node, local_id)
    except (OSError, ValueError) as exc:
        # the container still runs, as it would without this helper
        print(f"taskenv: warning: task variables not added: {exc}", file=sys.stderr)
    try:
        os.execv(_resolve_program(command[0]), command)
    except OSError as exc:
        print(f"taskenv: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
    return 127


def _resolve_program(name: str) -> str:
    """The program to run for `name`: itself when it names a path, else the first
    executable file of that name in an absolute entry of PATH (os.defpath's when PATH is
    unset).  An empty or relative entry is skipped: it names a directory relative to
    the step's working directory, which the image chooses.  (base/procs.py has the
    login node's resolver; this file runs on nodes without scrun-py.)
    FileNotFoundError when there is none."""
    import errno

    if "/" in name:
        return name
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(entry, name)
        if os.path.isabs(entry) and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(errno.ENOENT, "not found on PATH (relative PATH entries are "
                                          "ignored)", name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
