"""`list [--format table|json] [--quiet]`: the caller's containers under --root.

runc's output: a table (Go tabwriter, minimum width 12, padding 3) of ID, PID, STATUS,
BUNDLE, CREATED and OWNER, or a JSON array of runc's container state objects (`null`
when there are none), or only the ids.  scrun-py adds the Slurm job id: the column
JOBID and the JSON key `slurmJobId`.  Every entry is read through handle.Container; an
entry it refuses (not the caller's, a symlink, no or a corrupt record) is left out.
"""

from __future__ import annotations

import os
import sys

from scrun_py.base.errors import ScrunError
from scrun_py.base.layout import STOPPED
from scrun_py.container import rootdir
from scrun_py.container.handle import Container

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from scrun_py.base.invocation import Invocation

HEADER = ("ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER", "JOBID")
MIN_WIDTH = 12
PADDING = 3


def entries(root: str) -> list[dict[str, Any]]:
    """runc's list objects (plus slurmJobId) of the caller's containers under `root`,
    sorted by id."""
    fd = rootdir.open_root(root)
    if fd is None:
        return []
    try:
        with os.scandir(fd) as scan:
            names = sorted(e.name for e in scan if e.is_dir(follow_symlinks=False))
    except OSError as exc:
        raise ScrunError(f"cannot list {root}: {exc.strerror}") from None
    finally:
        os.close(fd)
    out: list[dict[str, Any]] = []
    for name in names:
        try:
            with Container(root, name) as container:
                record = container.record()
                status = container.status(record)
        except ScrunError:
            continue
        item: dict[str, Any] = {
            "ociVersion": record.oci_version,
            "id": record.id,
            "pid": 0 if status == STOPPED else record.reported_pid,
            "status": status,
            "bundle": record.bundle,
            "rootfs": record.rootfs,
            "created": record.created,
        }
        if record.annotations:
            item["annotations"] = record.annotations
        item["owner"] = record.owner
        item["slurmJobId"] = record.job_id
        out.append(item)
    return out


def table(items: list[dict[str, Any]]) -> str:
    """The rows as Go's tabwriter lays them out for runc: every column but the last
    padded to max(12, widest cell + 3)."""
    rows = [HEADER] + [
        (i["id"], str(i["pid"]), i["status"], i["bundle"], i["created"], i["owner"],
         str(i["slurmJobId"])) for i in items]
    widths = [max(MIN_WIDTH, *(len(r[col]) + PADDING for r in rows))
              for col in range(len(HEADER) - 1)]
    return "".join("".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False))
                   + r[-1] + "\n" for r in rows)


def render(items: list[dict[str, Any]], fmt: str, quiet: bool) -> str:
    if quiet:
        return "".join(i["id"] + "\n" for i in items)
    if fmt == "json":
        import json

        return (json.dumps(items, separators=(",", ":")) if items else "null") + "\n"
    if fmt != "table":
        raise ScrunError(f"invalid format option: {fmt}")
    return table(items)


def run(inv: Invocation, fmt: str = "table", quiet: bool = False) -> None:
    sys.stdout.write(render(entries(inv.root_dir), fmt, quiet))
