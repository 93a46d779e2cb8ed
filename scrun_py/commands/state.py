"""`state ID`: print the OCI state from the container record (no anchor round trip)."""

from __future__ import annotations

import sys

from scrun_py.container.handle import Container

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.base.invocation import Invocation


def run(inv: Invocation, container_id: str) -> None:
    sys.stdout.write(Container(inv.root_dir, container_id).state_line() + "\n")
