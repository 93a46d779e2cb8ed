"""Container status values and the transitions the anchor may make.  Pure."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """OCI status as printed by `state` (runtime-spec runtime.md)."""

    CREATING = "creating"
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"


_ORDER = {Status.CREATING: 0, Status.CREATED: 1, Status.RUNNING: 2, Status.STOPPED: 3}


def can_move(current: Status, new: Status) -> bool:
    """Statuses only move forward (Slurm's anchor has the same rule)."""
    return _ORDER[new] >= _ORDER[current]
