"""Container status values as `state` prints them, as an enum (the words are
base/layout.py's).  Pure."""

from __future__ import annotations

import enum

from scrun_py.base import layout


class Status(enum.StrEnum):
    """OCI status as printed by `state` (runtime-spec runtime.md)."""

    CREATING = layout.CREATING
    CREATED = layout.CREATED
    RUNNING = layout.RUNNING
    STOPPED = layout.STOPPED
