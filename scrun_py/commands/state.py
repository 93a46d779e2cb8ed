"""`state`: print the OCI state from the container record (no anchor round trip)."""

from __future__ import annotations

import sys

from scrun_py import store
from scrun_py.oci.state import render, state_document
from scrun_py.settings import Invocation


def run(inv: Invocation, container_id: str) -> None:
    record = store.load(inv.root, container_id)
    status = store.effective_status(record)
    doc = state_document(
        oci_version=record.oci_version, container_id=record.id, status=status,
        pid=record.anchor_pid, bundle=record.bundle, rootfs=record.rootfs,
        created=record.created, owner=record.owner, annotations=record.annotations)
    sys.stdout.write(render(doc) + "\n")
