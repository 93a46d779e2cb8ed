"""Container status values as `state` prints them.  Pure."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """OCI status as printed by `state` (runtime-spec runtime.md)."""

    CREATING = "creating"
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"
