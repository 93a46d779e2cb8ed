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

    from scrun_py.slurm.node_step import NodeSettings


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


def node_settings(slurm_conf: str, verb: str, runtime: str | None = None) -> NodeSettings:
    """What `ps` and `exec` (`verb`) take from the oci.conf beside `slurm_conf` for their
    helper step (slurm/node_step.py), `runtime` the site's `[exec] runtime`; a ScrunError
    when RunTimeKill cannot give the node runtime's command line."""
    from scrun_py.base.errors import ScrunError
    from scrun_py.slurm.node_step import NodeSettings

    settings = read_settings(slurm_conf)
    kill = settings["runtime_kill"]
    if not kill or settings["ignore_file_config_json"]:
        raise ScrunError(f"{verb} needs oci.conf's RunTimeKill to be a crun or runc "
                         "command line (and IgnoreFileConfigJson off)")
    return NodeSettings(kill, settings["srun_path"], list(settings["srun_args"]), slurm_conf,
                        runtime)
