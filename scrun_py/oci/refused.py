"""config.json settings the compute node's runtime cannot apply in a Slurm job, refused at
`create` with one line instead of a container that exits at once on the node.  Pure: the
raw config.json in, the reason out.

The list is what was seen, kept small:

* block I/O throttling (`linux.resources.blockIO.throttle*Device`, podman's and docker's
  `--device-read-bps`, `--device-write-iops`, …): oci.conf's runtime (rootless crun) writes
  the blkio cgroup's throttle files where the job gives it a cgroup and fails the
  container when the kernel refuses the device (`write blkio.throttle.read_bps_device:
  No such device`, `podman run --device-read-bps=/dev/zero:1M`), and has no cgroup to
  write them in a user's job: the job's I/O is Slurm's to limit.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

THROTTLE_KEYS = ("throttleReadBpsDevice", "throttleWriteBpsDevice",
                 "throttleReadIOPSDevice", "throttleWriteIOPSDevice")


def _at(raw: Any, *keys: str) -> Any:
    for key in keys:
        raw = raw.get(key) if isinstance(raw, dict) else None
    return raw


def refused_setting(raw: Any) -> str:
    """Why config.json (`raw`) asks what the node's runtime cannot do in a job, or ""."""
    block_io = _at(raw, "linux", "resources", "blockIO")
    for key in THROTTLE_KEYS:
        if _at(block_io, key):
            return (f"linux.resources.blockIO.{key}: block I/O throttling is not supported "
                    "by scrun-py: on the compute node the runtime fails the container or "
                    "cannot apply it (ask Slurm for the job's limits)")
    return ""
