"""The oci.conf settings of the verbs that reach the node: `create` hands some to the
anchor (`anchor/handoff.py`'s `RuntimeSettings`), `ps` and `exec` build the node
runtime's command line from them.

Read without pydantic (`oci_conf_syntax.read_fields`); only a file that reader is not
sure of goes through the model (`oci_conf.parse_oci_conf`), which accepts it or words
the problem.
"""

from __future__ import annotations

from scrun_py.site.oci_conf_syntax import oci_conf_path, read_fields, read_text

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any


def read_settings(slurm_conf: str) -> dict[str, Any]:
    """Every field of `OciConf` (defaults for the keys not set) of the oci.conf beside
    `slurm_conf`; an `OciConfError` when it is missing, unreadable or invalid."""
    path = oci_conf_path(slurm_conf)
    text = read_text(path)
    fields = read_fields(text)
    if fields is None:
        from scrun_py.site.oci_conf import parse_oci_conf

        fields = parse_oci_conf(text, source=path).model_dump()
    return fields
