"""Unit tests for scrun_py.site.policy: loading [policy] and enforcing it on config.json."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from scrun_py.base.errors import ConfigError, PolicyViolation
from scrun_py.site import policy, site_conf
from scrun_py.site.policy import Policy, Subject, enforce, load_policy
from scrun_py.site.site_conf import SiteConf

SUBJECT = Subject(uid=1002, user="alice", home="/home/alice")
DOCKER_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_NET_RAW", "CAP_SETUID", "CAP_KILL"]


def _config(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "process": {"args": ["true"], "capabilities": {
            s: list(DOCKER_CAPS) for s in ("bounding", "effective", "permitted")}},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/etc/hosts", "type": "bind",
             "source": "/home/alice/.local/share/containers/x/hosts",
             "options": ["rbind", "rprivate"]},
        ],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "mount", "ipc", "uts")]},
    }
    config.update(changes)
    return config


def _site(tmp_path: Path, text: str) -> SiteConf:
    (tmp_path / "scrun-py.toml").write_text(text)
    return site_conf.load(tmp_path / "slurm.conf")


def _enforce(pol: Policy, config: dict[str, Any] | None = None,
             bundle: str = "/home/alice/b") -> policy.Outcome:
    return enforce(pol, config if config is not None else _config(), bundle=bundle,
                   rootfs=f"{bundle}/rootfs", subject=SUBJECT)


class TestLoad:
    def test_missing_file_is_the_empty_policy(self, tmp_path: Path) -> None:
        assert load_policy(site_conf.load(tmp_path / "slurm.conf")).empty

    def test_every_rule_parsed(self, tmp_path: Path) -> None:
        pol = load_policy(_site(tmp_path, """
[policy]
no_new_privileges = true
readonly_rootfs = true
capabilities = ["CAP_CHOWN", "kill"]
capabilities_action = "refuse"
private_namespaces = ["pid", "ipc"]
devices = ["/dev/fuse"]
mount_sources = ["{home}", "/scratch"]
bundles = ["{home}/containers"]
allow_root_jobs = false
"""))
        assert Policy(no_new_privileges=True, readonly_rootfs=True,
                      capabilities=frozenset({"CAP_CHOWN", "CAP_KILL"}),
                      capabilities_action="refuse", private_namespaces=("pid", "ipc"),
                      devices=("/dev/fuse",), mount_sources=("{home}", "/scratch"),
                      bundles=("{home}/containers",), allow_root_jobs=False) == pol

    @pytest.mark.parametrize(("text", "needle"), [
        ("[polcy]\nno_new_privileges = true\n", "unknown table [polcy]"),
        ("[policy]\nno_new_priviledges = true\n", "unknown key no_new_priviledges"),
        ("[policy]\nreadonly_rootfs = 1\n", "readonly_rootfs: must be true or false"),
        ("[policy]\ncapabilities = \"CAP_KILL\"\n", "capabilities: must be a list"),
        ("[policy]\ncapabilities = [\"CAP_K-ILL\"]\n", "is not a capability"),
        ("[policy]\ncapabilities_action = \"warn\"\n", "must be \"drop\" or \"refuse\""),
        ("[policy]\nprivate_namespaces = [\"net\"]\n", "'net' is not one of"),
        ("[policy]\nmount_sources = [\"scratch\"]\n", "must be an absolute path"),
        ("[policy]\nbundles = [1]\n", "bundles: must be a list of strings"),
        ("[policy]\nallow_root_jobs = \"no\"\n", "allow_root_jobs: must be true or false"),
        ("[policy\n", "scrun-py.toml"),
    ])
    def test_bad_policy_names_file_and_key(self, tmp_path: Path, text: str,
                                           needle: str) -> None:
        with pytest.raises(ConfigError) as exc:
            load_policy(_site(tmp_path, text))
        assert needle in str(exc.value)
        assert "scrun-py.toml" in str(exc.value)


class TestRewrites:
    def test_empty_policy_changes_nothing(self) -> None:
        out = _enforce(Policy())
        assert (_config(), []) == (out.config, out.changes)

    def test_no_new_privileges_and_readonly_rootfs(self) -> None:
        original = _config()
        out = _enforce(Policy(no_new_privileges=True, readonly_rootfs=True), original)
        assert out.config["process"]["noNewPrivileges"] is True
        assert out.config["root"]["readonly"] is True
        assert 2 == len(out.changes)
        assert _config() == original  # the caller's dict is not modified

    def test_already_compliant_config_is_not_rewritten(self) -> None:
        config = _config(root={"path": "rootfs", "readonly": True})
        config["process"]["noNewPrivileges"] = True
        assert [] == _enforce(Policy(no_new_privileges=True, readonly_rootfs=True),
                              config).changes

    def test_capabilities_outside_the_allow_list_are_dropped(self) -> None:
        out = _enforce(Policy(capabilities=frozenset({"CAP_CHOWN", "CAP_KILL"})))
        caps = out.config["process"]["capabilities"]
        assert {s: ["CAP_CHOWN", "CAP_KILL"] for s in
                ("bounding", "effective", "permitted")} == caps
        assert ["capabilities: dropped CAP_DAC_OVERRIDE, CAP_NET_RAW, CAP_SETUID"] == \
            out.changes


class TestRefusals:
    def _refused(self, pol: Policy, config: dict[str, Any] | None = None,
                 bundle: str = "/home/alice/b") -> str:
        with pytest.raises(PolicyViolation) as exc:
            _enforce(pol, config, bundle)
        return str(exc.value)

    def test_capabilities_refuse(self) -> None:
        msg = self._refused(Policy(capabilities=frozenset(DOCKER_CAPS[:2]),
                                   capabilities_action="refuse"))
        assert ("refused by site policy rule capabilities: CAP_KILL, CAP_NET_RAW, "
                "CAP_SETUID not allowed") == msg

    def test_host_namespace(self) -> None:
        msg = self._refused(Policy(private_namespaces=("pid", "network")))
        assert msg.endswith("rule private_namespaces: the container would share the "
                            "host's network namespace")

    def test_joining_a_namespace_by_path(self) -> None:
        config = _config()
        config["linux"]["namespaces"][0]["path"] = "/proc/1/ns/pid"
        msg = self._refused(Policy(private_namespaces=("pid",)), config)
        assert "join the pid namespace /proc/1/ns/pid" in msg

    def test_device_not_in_allow_list(self) -> None:
        config = _config()
        config["linux"]["devices"] = [{"path": "/dev/sda", "type": "b", "major": 8,
                                       "minor": 0}]
        assert "rule devices: device /dev/sda is not allowed" in \
            self._refused(Policy(devices=("/dev/fuse",)), config)
        allowed = copy.deepcopy(config)
        allowed["linux"]["devices"][0]["path"] = "/dev/fuse"
        assert [] == _enforce(Policy(devices=("/dev/fuse",)), allowed).changes

    def test_all_devices_cgroup_rule(self) -> None:
        config = _config()
        config["linux"]["resources"] = {"devices": [{"allow": True, "access": "rwm"}]}
        assert "access to all devices" in self._refused(Policy(devices=()), config)

    def test_bind_mount_source(self) -> None:
        config = _config()
        config["mounts"].append({"destination": "/host", "type": "bind", "source": "/etc",
                                 "options": ["rbind"]})
        assert "rule mount_sources: bind mount of /etc is not allowed" in \
            self._refused(Policy(mount_sources=("{home}",)), config)

    def test_bind_by_option_and_prefix_is_per_component(self) -> None:
        config = _config()
        config["mounts"].append({"destination": "/x", "type": "none",
                                 "source": "/home/alice2/data", "options": ["bind"]})
        assert "/home/alice2/data" in self._refused(
            Policy(mount_sources=("/home/alice",)), config)

    def test_non_bind_mounts_are_not_checked(self) -> None:
        assert [] == _enforce(Policy(mount_sources=("{home}",))).changes

    def test_bundle_location(self) -> None:
        assert "rule bundles: bundle /tmp/b is not in an allowed location" in \
            self._refused(Policy(bundles=("{home}",)), bundle="/tmp/b")
        assert [] == _enforce(Policy(bundles=("{home}",))).changes

    def test_root_jobs_refused(self) -> None:
        """allow_root_jobs = false refuses a container of uid 0 (a root engine's: every
        container a job of root), before anything else is checked."""
        root = Subject(uid=0, user="root", home="/root")
        pol = Policy(allow_root_jobs=False, bundles=("{home}",))
        with pytest.raises(PolicyViolation) as exc:
            enforce(pol, _config(), bundle="/var/lib/docker/b",
                    rootfs="/var/lib/docker/b/rootfs", subject=root)
        assert ("refused by site policy rule allow_root_jobs: the container's job would "
                "run as root (uid 0); run containers through a rootless engine"
                ) == str(exc.value)

    def test_root_jobs_allowed_by_default_and_users_never_refused(self) -> None:
        root = Subject(uid=0, user="root", home="/root")
        assert Policy().empty
        assert not Policy(allow_root_jobs=False).empty
        assert [] == enforce(Policy(), _config(), bundle="/b", rootfs="/b/rootfs",
                             subject=root).changes
        assert [] == _enforce(Policy(allow_root_jobs=False)).changes  # alice, uid 1002
