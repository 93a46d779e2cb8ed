"""`spec [--rootless] [--bundle DIR]`: write runc's default config.json into the bundle.

The document is runc's (`runc spec`), key for key and in its order, written as runc
writes it: tab-indented, no trailing newline, mode 0666 less the umask, and never over an
existing config.json (runc's words: `File config.json exists. Remove it first`).
`--rootless` makes runc's rootless variant: a user namespace mapping root to the caller,
no network namespace, /sys bind-mounted, no device cgroup rule, devpts without gid=5.
"""

from __future__ import annotations

import copy
import os

from scrun_py.base.errors import ScrunError

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from scrun_py.base.invocation import Invocation

CONFIG = "config.json"

# runc 1.1's `runc spec`, in its key order
DEFAULT_SPEC: dict[str, Any] = {
    "ociVersion": "1.0.2-dev",
    "process": {
        "terminal": True,
        "user": {
            "uid": 0,
            "gid": 0
        },
        "args": [
            "sh"
        ],
        "env": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TERM=xterm"
        ],
        "cwd": "/",
        "capabilities": {
            "bounding": [
                "CAP_AUDIT_WRITE",
                "CAP_KILL",
                "CAP_NET_BIND_SERVICE"
            ],
            "effective": [
                "CAP_AUDIT_WRITE",
                "CAP_KILL",
                "CAP_NET_BIND_SERVICE"
            ],
            "permitted": [
                "CAP_AUDIT_WRITE",
                "CAP_KILL",
                "CAP_NET_BIND_SERVICE"
            ],
            "ambient": [
                "CAP_AUDIT_WRITE",
                "CAP_KILL",
                "CAP_NET_BIND_SERVICE"
            ]
        },
        "rlimits": [
            {
                "type": "RLIMIT_NOFILE",
                "hard": 1024,
                "soft": 1024
            }
        ],
        "noNewPrivileges": True
    },
    "root": {
        "path": "rootfs",
        "readonly": True
    },
    "hostname": "runc",
    "mounts": [
        {
            "destination": "/proc",
            "type": "proc",
            "source": "proc"
        },
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": [
                "nosuid",
                "strictatime",
                "mode=755",
                "size=65536k"
            ]
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": [
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5"
            ]
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": [
                "nosuid",
                "noexec",
                "nodev",
                "mode=1777",
                "size=65536k"
            ]
        },
        {
            "destination": "/dev/mqueue",
            "type": "mqueue",
            "source": "mqueue",
            "options": [
                "nosuid",
                "noexec",
                "nodev"
            ]
        },
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": [
                "nosuid",
                "noexec",
                "nodev",
                "ro"
            ]
        },
        {
            "destination": "/sys/fs/cgroup",
            "type": "cgroup",
            "source": "cgroup",
            "options": [
                "nosuid",
                "noexec",
                "nodev",
                "relatime",
                "ro"
            ]
        }
    ],
    "linux": {
        "resources": {
            "devices": [
                {
                    "allow": False,
                    "access": "rwm"
                }
            ]
        },
        "namespaces": [
            {
                "type": "pid"
            },
            {
                "type": "network"
            },
            {
                "type": "ipc"
            },
            {
                "type": "uts"
            },
            {
                "type": "mount"
            }
        ],
        "maskedPaths": [
            "/proc/acpi",
            "/proc/asound",
            "/proc/kcore",
            "/proc/keys",
            "/proc/latency_stats",
            "/proc/timer_list",
            "/proc/timer_stats",
            "/proc/sched_debug",
            "/sys/firmware",
            "/proc/scsi"
        ],
        "readonlyPaths": [
            "/proc/bus",
            "/proc/fs",
            "/proc/irq",
            "/proc/sys",
            "/proc/sysrq-trigger"
        ]
    }
}


def document(*, rootless: bool, uid: int | None = None, gid: int | None = None
             ) -> dict[str, Any]:
    """runc's default spec; with `rootless`, its rootless variant mapping container root
    to `uid`/`gid` (default: the caller's effective ids)."""
    spec = copy.deepcopy(DEFAULT_SPEC)
    if not rootless:
        return spec
    for mount in spec["mounts"]:
        if mount["destination"] == "/dev/pts":
            mount["options"] = [o for o in mount["options"] if o != "gid=5"]
        elif mount["destination"] == "/sys":
            mount.update(type="none", source="/sys",
                         options=["rbind", "nosuid", "noexec", "nodev", "ro"])
    linux = spec["linux"]
    del linux["resources"]
    namespaces = [n for n in linux["namespaces"] if n["type"] != "network"]
    namespaces.append({"type": "user"})
    uid = os.geteuid() if uid is None else uid
    gid = os.getegid() if gid is None else gid
    spec["linux"] = {
        "uidMappings": [{"containerID": 0, "hostID": uid, "size": 1}],
        "gidMappings": [{"containerID": 0, "hostID": gid, "size": 1}],
        **{k: v for k, v in linux.items() if k != "namespaces"},
        "namespaces": namespaces,
    }
    # runc's key order: mappings, then namespaces, then the masked and read-only paths
    spec["linux"] = {k: spec["linux"][k] for k in
                     ("uidMappings", "gidMappings", "namespaces", "maskedPaths",
                      "readonlyPaths")}
    return spec


def render(spec: dict[str, Any]) -> str:
    """As runc writes it: tab-indented, no trailing newline."""
    import json

    return json.dumps(spec, indent="\t")


def write(bundle: str, spec: dict[str, Any]) -> None:
    """Write config.json in `bundle`; runc's errors when the bundle is not a directory
    or config.json exists."""
    try:
        os.stat(bundle)
    except OSError as exc:
        raise ScrunError(f"chdir {bundle}: {(exc.strerror or str(exc)).lower()}") from None
    path = os.path.join(bundle, CONFIG)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666)
    except FileExistsError:
        raise ScrunError(f"File {CONFIG} exists. Remove it first") from None
    except OSError as exc:
        raise ScrunError(f"open {path}: {(exc.strerror or str(exc)).lower()}") from None
    with os.fdopen(fd, "w") as out:
        out.write(render(spec))


def run(inv: Invocation, bundle: str | None = None, rootless: bool = False) -> None:
    write(bundle or ".", document(rootless=rootless))
