"""What `create` hands to the anchor process: one JSON document (AnchorSpec) written to a
pipe the anchor reads to EOF (read_spec), never on its command line (anchor/launch.py).

`create` validates config.json and oci.conf (through pydantic only where a value
needs it) and passes only the fields the anchor uses, so the anchor never imports
pydantic: it starts faster and stays smaller (one anchor runs per container).
"""

from __future__ import annotations

import os

from scrun_py.base.records import NamedTuple
from scrun_py.container import fastjson

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any


class ProcessInfo(NamedTuple):
    args: list[str]
    terminal: bool = False


class ConfigInfo(NamedTuple):
    ociVersion: str  # noqa: N815 - mirrors the config.json key
    process: ProcessInfo
    annotations: dict[str, str] = {}  # noqa: RUF012 - read only


class BundleInfo(NamedTuple):
    """The parts of a validated bundle the anchor needs (paths as strings: neither
    create's path after the fork nor the anchor imports pathlib)."""

    path: str
    rootfs: str
    config: ConfigInfo
    imported_env: dict[str, str] = {}  # noqa: RUF012 - read only
    # oci/resources.py engine_request: [var, value, engine flag] of linux.resources
    engine_request: list[list[str]] = []  # noqa: RUF012 - read only

    @property
    def config_file(self) -> str:
        return os.path.join(self.path, "config.json")

    def to_dict(self) -> dict[str, Any]:
        config = {**self.config._asdict(), "process": self.config.process._asdict()}
        return {"path": str(self.path), "rootfs": str(self.rootfs), "config": config,
                "imported_env": self.imported_env, "engine_request": self.engine_request}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BundleInfo:
        cfg = d["config"]
        return cls(path=d["path"], rootfs=d["rootfs"],
                   config=ConfigInfo(ociVersion=cfg["ociVersion"],
                                     process=ProcessInfo(**cfg["process"]),
                                     annotations=dict(cfg["annotations"])),
                   imported_env=dict(d["imported_env"]),
                   engine_request=[list(r) for r in d.get("engine_request", [])])


class RuntimeSettings(NamedTuple):
    """The oci.conf keys scrun-py uses on the login node (docs/oci.conf.md)."""

    runtime_kill: str | None = None
    ignore_file_config_json: bool = False
    srun_path: str = "srun"
    srun_args: list[str] = []  # noqa: RUF012 - read only
    stdio_debug: str | None = None
    file_debug: str | None = None
    syslog_debug: str | None = None


class AnchorSpec(NamedTuple):
    container_id: str
    root: str
    orig_bundle: str
    pid_file: str
    console_socket: str
    log_path: str
    log_format: str
    debug: bool
    verbosity: int
    slurm_conf: str
    ready_fd: int
    created: str
    bundle_info: dict[str, Any] = {}  # noqa: RUF012 - read only
    runtime: dict[str, Any] = {}  # noqa: RUF012 - read only
    audit_file: str = ""
    audit_syslog: bool = False
    engine: str = ""
    log_level: str | None = None  # --log-level, as given
    site_dir: str = ""  # where scrun.lua is looked for ("": next to slurm_conf)
    lua_override: bool = True  # whether SCRUN_PY_LUA may name another scrun.lua
    staging: dict[str, Any] = {}  # noqa: RUF012 - [staging] of scrun-py.toml, for scrun.lua

    def to_json(self) -> str:
        return fastjson.dumps(self._asdict())

    @classmethod
    def from_json(cls, data: str) -> AnchorSpec:
        return cls(**fastjson.loads(data))


def read_spec(fd: int) -> bytes:
    """Everything on the pipe `fd` up to EOF (the writer closes it after the whole
    spec; b"" when it closed without one); closes `fd`."""
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)
