"""Shared by the CLI tests: the click CLI run in-process, as the console script runs it,
and a container record on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrun_py.cli import click_app
from scrun_py.container import spool
from scrun_py.container.record import ContainerRecord


def run(argv: list[str]) -> int:
    """Run the CLI like the console script does and return its exit status."""
    with pytest.raises(SystemExit) as info:
        click_app.main(argv)
    code = info.value.code
    return code if isinstance(code, int) else (0 if code is None else 1)


def stored(root: Path, status: str, anchor_pid: int, **fields: object) -> Path:
    """A container record on disk, as an anchor would have left it (job_id 0: no scancel)."""
    cdir = Path(spool.make_container_dir(root, "c1"))
    record = ContainerRecord(id="c1", bundle="/b/c1", rootfs="/b/c1/rootfs",
                                   status=status, anchor_pid=anchor_pid,
                                   created="2024-01-02T03:04:05.000000Z", owner="tuser",
                                   job_id=0)
    for key, value in fields.items():
        setattr(record, key, value)
    spool.save_record(root, record)
    return cdir
