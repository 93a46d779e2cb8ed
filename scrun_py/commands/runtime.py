"""The oci.conf settings that the verbs reaching the node use (`create` hands them to the
anchor; `ps` and `exec` build the node runtime's command line from them)."""

from __future__ import annotations

import os

from scrun_py.anchor.handoff import RuntimeSettings

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from scrun_py.base.invocation import Invocation


def runtime_settings(inv: Invocation) -> dict[str, Any]:
    """The oci.conf settings the anchor uses (`RuntimeSettings`' fields): every key read
    without pydantic (oci_conf_syntax.read_fields); a file that reader is not sure of
    goes through the full model, which accepts it or words the problem."""
    from scrun_py.site.oci_conf_syntax import read_fields, read_text

    path = os.path.join(os.path.dirname(inv.slurm_conf_file()), "oci.conf")
    text = read_text(path)
    fields = read_fields(text)
    if fields is None:
        from scrun_py.site.oci_conf import parse_oci_conf

        fields = parse_oci_conf(text, source=path).model_dump()
    return {name: fields[name] for name in RuntimeSettings._fields}
