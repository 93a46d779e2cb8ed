"""The container record (`state.json`) by path: written atomically by the anchor on
every transition; read through the container handle (container/handle.py), which owns
the record's fields, their defaults and its reading.

The record is a cache of the anchor's state; `effective_status` refreshes it
against the anchor process (runc refreshState), so a dead anchor reads as stopped.
"""

from __future__ import annotations

import os

from scrun_py.base.layout import STATE_FILE
from scrun_py.container.handle import Container, ContainerRecord
from scrun_py.container.spool import container_dir, write_atomic
from scrun_py.container.status import Status

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.container.spool import PathArg

__all__ = ["ContainerRecord", "anchor_alive", "effective_status", "load", "save"]


def save(root: PathArg, record: ContainerRecord) -> None:
    write_atomic(os.path.join(container_dir(root, record.id), STATE_FILE), record.to_json())


def load(root: PathArg, container_id: str) -> ContainerRecord:
    return Container(os.fspath(root), container_id).record()


def anchor_alive(record: ContainerRecord) -> bool:
    return Container.anchor_alive(record)


def effective_status(record: ContainerRecord) -> Status:
    return Status(Container.status(record))
