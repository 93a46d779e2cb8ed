"""What `create` hands to the anchor process (one JSON argument)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class AnchorSpec:
    container_id: str
    root: str
    bundle: str
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

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, data: str) -> AnchorSpec:
        return cls(**json.loads(data))
