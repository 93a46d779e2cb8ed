"""What scrun-py reads from slurm.conf itself (Slurm's commands read the rest).

No re: the anchor reads ClusterName (for scrun.lua's `slurm.CLUSTER_NAME`) before salloc
runs, and re's import is on its critical path (its cost: base/lean.py)."""

from __future__ import annotations

import os


def parse_cluster_name(text: str) -> str | None:
    """The value of the first `ClusterName = value` line of slurm.conf's `text` (the key
    in any case, slurm.conf's rule), or None."""
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped[:11].lower() != "clustername":
            continue
        rest = stripped[11:].lstrip()
        if not rest.startswith("="):
            continue
        value = rest[1:].lstrip()
        end = next((i for i, ch in enumerate(value) if ch.isspace() or ch == "#"), len(value))
        if end:
            return value[:end]
    return None


def cluster_name(slurm_conf: str | os.PathLike[str] | None) -> str | None:
    """ClusterName from the slurm.conf file `slurm_conf`, or None (no file, no such line)."""
    if slurm_conf is None:
        return None
    try:
        with open(slurm_conf, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    return parse_cluster_name(text)
