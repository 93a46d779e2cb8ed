"""`features`: static runtime-features JSON (runtime-spec features.md)."""

from __future__ import annotations

import json
import sys

from scrun_py import OCI_SPEC_VERSION, __version__

FEATURES = {
    "ociVersionMin": "1.0.0",
    "ociVersionMax": OCI_SPEC_VERSION,
    "hooks": [],
    "mountOptions": [],
    "linux": {
        "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"],
        "capabilities": [],
        "cgroup": {"v1": True, "v2": True, "systemd": False, "systemdUser": False},
        "apparmor": {"enabled": False},
        "selinux": {"enabled": False},
        "intelRdt": {"enabled": False},
    },
    "annotations": {
        "org.scrun-py.version": __version__,
        "org.scrun-py.note": "containers run as Slurm jobs; the OCI runtime on the compute "
                             "nodes (oci.conf) applies config.json",
    },
}


def run() -> None:
    sys.stdout.write(json.dumps(FEATURES, indent=2) + "\n")
