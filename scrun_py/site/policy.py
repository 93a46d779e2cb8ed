"""Site security policy: the [policy] table of scrun-py.toml, enforced on config.json
before stage-in, for every container.

A rule either rewrites config.json, where the rewrite only takes privileges away
(no_new_privileges, readonly_rootfs, capabilities with action "drop"), or refuses the
container with an error that names the rule.  Everything here is pure: `create` reads
config.json, calls `enforce`, and writes the result back.

    [policy]
    no_new_privileges = true           # process.noNewPrivileges = true
    readonly_rootfs = true             # root.readonly = true
    capabilities = ["CAP_CHOWN", ...]  # the only capabilities a container may hold
    capabilities_action = "drop"       # others are removed ("drop") or refused ("refuse")
    private_namespaces = ["pid", "ipc", "uts", "mount"]  # never shared with the host
    devices = ["/dev/fuse"]            # the only linux.devices a container may have
    mount_sources = ["{home}", "/scratch"]  # where bind mounts may come from
    bundles = ["{home}", "/var/lib/containers"]  # where bundles and rootfs may live
    allow_root_jobs = false            # refuse a container whose job would be root's

Paths may use {home}, {user} and {uid} of the user who runs the container.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

from scrun_py.base.errors import PolicyViolation
from scrun_py.base.records import NamedTuple
from scrun_py.site.site_conf import SiteConf

KEYS = ("no_new_privileges", "readonly_rootfs", "capabilities", "capabilities_action",
        "private_namespaces", "devices", "mount_sources", "bundles", "allow_root_jobs")
NAMESPACE_TYPES = ("pid", "network", "mount", "ipc", "uts", "user", "cgroup", "time")
CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")
_CAP_RE = re.compile(r"CAP_[A-Z0-9_]+")
_PLACEHOLDER_RE = re.compile(r"\{(home|user|uid)\}")


# Records are NamedTuples: dataclasses imports inspect (its cost: base/lean.py), and
# `create` reads the policy before it hands the anchor its spec.
class Subject(NamedTuple):
    """The user a container runs for: fills {home}, {user} and {uid} in policy paths."""

    uid: int
    user: str
    home: str

    def expand(self, pattern: str) -> str:
        values = {"home": self.home, "user": self.user, "uid": str(self.uid)}
        return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], pattern)


class Policy(NamedTuple):
    no_new_privileges: bool = False
    readonly_rootfs: bool = False
    capabilities: frozenset[str] | None = None
    capabilities_action: str = "drop"
    private_namespaces: tuple[str, ...] = ()
    devices: tuple[str, ...] | None = None
    mount_sources: tuple[str, ...] | None = None
    bundles: tuple[str, ...] | None = None
    allow_root_jobs: bool = True

    @property
    def empty(self) -> bool:
        return self == Policy()


class Outcome(NamedTuple):
    config: dict[str, Any]
    changes: list[str]


def _str_list(site: SiteConf, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise site.error("policy", key, "must be a list of strings")
    return tuple(value)


def _path_list(site: SiteConf, key: str, value: Any) -> tuple[str, ...]:
    paths = _str_list(site, key, value)
    for p in paths:
        if not (p.startswith("/") or _PLACEHOLDER_RE.match(p)):
            raise site.error("policy", key, f"{p!r} must be an absolute path or start "
                             "with {home}")
    return paths


def load_policy(site: SiteConf) -> Policy:
    table = site.section("policy", KEYS)
    kwargs: dict[str, Any] = {}
    for key in ("no_new_privileges", "readonly_rootfs", "allow_root_jobs"):
        if key in table:
            if not isinstance(table[key], bool):
                raise site.error("policy", key, "must be true or false")
            kwargs[key] = table[key]
    if "capabilities" in table:
        caps = set()
        for name in _str_list(site, "capabilities", table["capabilities"]):
            cap = name.upper() if name.upper().startswith("CAP_") else f"CAP_{name.upper()}"
            if not _CAP_RE.fullmatch(cap):
                raise site.error("policy", "capabilities", f"{name!r} is not a capability")
            caps.add(cap)
        kwargs["capabilities"] = frozenset(caps)
    if "capabilities_action" in table:
        if table["capabilities_action"] not in ("drop", "refuse"):
            raise site.error("policy", "capabilities_action", 'must be "drop" or "refuse"')
        kwargs["capabilities_action"] = table["capabilities_action"]
    if "private_namespaces" in table:
        kinds = _str_list(site, "private_namespaces", table["private_namespaces"])
        for kind in kinds:
            if kind not in NAMESPACE_TYPES:
                raise site.error("policy", "private_namespaces",
                                 f"{kind!r} is not one of {', '.join(NAMESPACE_TYPES)}")
        kwargs["private_namespaces"] = kinds
    if "devices" in table:
        kwargs["devices"] = _path_list(site, "devices", table["devices"])
    for key in ("mount_sources", "bundles"):
        if key in table:
            kwargs[key] = _path_list(site, key, table[key])
    return Policy(**kwargs)


def _under(path: str, prefixes: tuple[str, ...], subject: Subject) -> bool:
    real = os.path.realpath(path)
    for pattern in prefixes:
        prefix = os.path.realpath(subject.expand(pattern))
        if os.path.commonpath([real, prefix]) == prefix:
            return True
    return False


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _check_namespaces(policy: Policy, config: dict[str, Any]) -> None:
    namespaces = {ns.get("type"): ns for ns in _list(_dict(config.get("linux")).get("namespaces"))
                  if isinstance(ns, dict)}
    for kind in policy.private_namespaces:
        ns = namespaces.get(kind)
        if ns is None:
            raise PolicyViolation("private_namespaces",
                                  f"the container would share the host's {kind} namespace")
        if ns.get("path"):
            raise PolicyViolation("private_namespaces",
                                  f"the container would join the {kind} namespace {ns['path']}")


def _check_devices(policy: Policy, config: dict[str, Any]) -> None:
    if policy.devices is None:
        return
    linux = _dict(config.get("linux"))
    for dev in _list(linux.get("devices")):
        path = _dict(dev).get("path", "?")
        if path not in policy.devices:
            raise PolicyViolation("devices", f"device {path} is not allowed")
    for rule in map(_dict, _list(_dict(linux.get("resources")).get("devices"))):
        if rule.get("allow") and rule.get("type", "a") == "a" and rule.get("major") is None:
            raise PolicyViolation("devices", "access to all devices is not allowed")


def _is_bind(mount: dict[str, Any]) -> bool:
    options = _list(mount.get("options"))
    return mount.get("type") == "bind" or "bind" in options or "rbind" in options


def _check_mounts(policy: Policy, config: dict[str, Any], bundle: str,
                  subject: Subject) -> None:
    if policy.mount_sources is None:
        return
    for mount in map(_dict, _list(config.get("mounts"))):
        if not _is_bind(mount):
            continue
        source = str(mount.get("source", ""))
        source = source if os.path.isabs(source) else os.path.join(bundle, source)
        if not _under(source, policy.mount_sources, subject):
            raise PolicyViolation("mount_sources",
                                  f"bind mount of {source} is not allowed")


def _check_bundle(policy: Policy, bundle: str, rootfs: str, subject: Subject) -> None:
    if policy.bundles is None:
        return
    for what, path in (("bundle", bundle), ("rootfs", rootfs)):
        if not _under(path, policy.bundles, subject):
            raise PolicyViolation("bundles", f"{what} {path} is not in an allowed location")


def _check_job_user(policy: Policy, subject: Subject) -> None:
    """The job is the real user's (salloc runs as them): root's when that is uid 0, as
    with a root dockerd or root podman, where every container is a job of root."""
    if not policy.allow_root_jobs and subject.uid == 0:
        raise PolicyViolation("allow_root_jobs", "the container's job would run as root "
                              "(uid 0); run containers through a rootless engine")


def _apply_capabilities(policy: Policy, config: dict[str, Any], changes: list[str]) -> None:
    if policy.capabilities is None:
        return
    caps = _dict(_dict(config.get("process")).get("capabilities"))
    extra = sorted({c for s in CAP_SETS for c in _list(caps.get(s))
                    if c not in policy.capabilities})
    if not extra:
        return
    if policy.capabilities_action == "refuse":
        raise PolicyViolation("capabilities", f"{', '.join(extra)} not allowed")
    for s in CAP_SETS:
        if s in caps:
            caps[s] = [c for c in _list(caps[s]) if c in policy.capabilities]
    changes.append(f"capabilities: dropped {', '.join(extra)}")


def enforce(policy: Policy, config: dict[str, Any], *, bundle: str, rootfs: str,
            subject: Subject) -> Outcome:
    """Check and rewrite a copy of config.json; raise PolicyViolation on a refusal."""
    _check_job_user(policy, subject)
    _check_bundle(policy, bundle, rootfs, subject)
    _check_namespaces(policy, config)
    _check_devices(policy, config)
    _check_mounts(policy, config, bundle, subject)
    out = Outcome(copy.deepcopy(config), [])
    _apply_capabilities(policy, out.config, out.changes)
    if policy.no_new_privileges:
        process = out.config.setdefault("process", {})
        if process.get("noNewPrivileges") is not True:
            process["noNewPrivileges"] = True
            out.changes.append("no_new_privileges: process.noNewPrivileges set")
    if policy.readonly_rootfs:
        root = out.config.setdefault("root", {})
        if root.get("readonly") is not True:
            root["readonly"] = True
            out.changes.append("readonly_rootfs: root.readonly set")
    return out
