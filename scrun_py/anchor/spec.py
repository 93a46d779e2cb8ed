"""What `create` hands to the anchor process (one JSON argument).

`create` validates config.json and oci.conf (through pydantic only where a value
needs it) and passes only the fields the anchor uses, so the anchor never imports
pydantic: it starts faster and stays smaller (one anchor runs per container).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProcessInfo:
    args: list[str]
    terminal: bool = False


@dataclass(frozen=True)
class ConfigInfo:
    ociVersion: str  # noqa: N815 - mirrors the config.json key
    process: ProcessInfo
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BundleInfo:
    """The parts of a validated bundle the anchor needs."""

    path: Path
    rootfs: Path
    config: ConfigInfo
    imported_env: dict[str, str] = field(default_factory=dict)

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "rootfs": str(self.rootfs),
                "config": dataclasses.asdict(self.config), "imported_env": self.imported_env}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BundleInfo:
        cfg = d["config"]
        return cls(path=Path(d["path"]), rootfs=Path(d["rootfs"]),
                   config=ConfigInfo(ociVersion=cfg["ociVersion"],
                                     process=ProcessInfo(**cfg["process"]),
                                     annotations=dict(cfg["annotations"])),
                   imported_env=dict(d["imported_env"]))


@dataclass(frozen=True)
class RuntimeSettings:
    """The oci.conf keys scrun-py uses on the login node (docs/oci.conf.md)."""

    runtime_kill: str | None = None
    ignore_file_config_json: bool = False
    srun_path: str = "srun"
    srun_args: list[str] = field(default_factory=list)
    stdio_debug: str | None = None
    file_debug: str | None = None
    syslog_debug: str | None = None


@dataclass(frozen=True)
class AnchorSpec:
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
    bundle_info: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    audit_file: str = ""
    audit_syslog: bool = False
    engine: str = ""
    log_level: str | None = None  # --log-level, as given

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, data: str) -> AnchorSpec:
        return cls(**json.loads(data))
