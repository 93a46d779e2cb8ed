"""Site security policy ([policy] in scrun-py.toml) on real containers: hardening that
the container itself observes, and refusals that name the rule, through the CLI and
through docker and rootless podman."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import STATE, Bundle, Env, User, leftovers, squeue
from tests.e2e.test_engines import (  # noqa: F401 - fixtures
    Engine,
    _guarded,
    any_engine,
    engines_up,
)
from tests.e2e.test_rootless_docker import RootlessDocker, rootless_docker  # noqa: F401

pytestmark = pytest.mark.e2e

HARDENING = """[policy]
no_new_privileges = true
readonly_rootfs = true
capabilities = ["CAP_KILL"]
"""
PROBE = ('grep -E "^(NoNewPrivs|CapBnd)" /proc/self/status; '
         "if touch /probe 2>/dev/null; then echo rootfs-writable; "
         "else echo rootfs-readonly; fi")


def _config(bundle: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle / "config.json").read_text())
    return data


def _unhardened(env: Env, args: list[str]) -> Path:
    """A bundle that asks for privileges: `crun spec --rootless` already sets
    noNewPrivileges and a read-only root, so turn both off."""
    bundle = env.bundle(args).path
    cfg = _config(bundle)
    cfg["process"]["noNewPrivileges"] = False
    cfg["root"]["readonly"] = False
    (bundle / "config.json").write_text(json.dumps(cfg))
    return bundle


class TestPolicyThroughTheCli:
    def test_hardening_is_seen_inside_the_container(self, env: Env, conf_dir: Path) -> None:
        """no_new_privileges, readonly_rootfs and a capability allow-list (drop) are
        written into config.json and enforced by the runtime on the node."""
        (conf_dir / "scrun-py.toml").write_text(HARDENING)
        conf = conf_dir / "slurm.conf"
        cid = f"pol{uuid.uuid4().hex[:8]}"
        bundle = _unhardened(env, ["sh", "-c", PROBE])
        created = env.create(cid, Bundle(bundle), conf=conf)
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", cid, conf=conf).returncode
        assert 0 == created.wait_exit()
        out = created.stdout()
        assert "NoNewPrivs:\t1" in out, out
        assert "CapBnd:\t0000000000000020" in out, out  # CAP_KILL (5) only
        assert "rootfs-readonly" in out, out
        cfg = _config(bundle)
        assert cfg["process"]["noNewPrivileges"] is True
        assert cfg["root"]["readonly"] is True
        assert {"CAP_KILL"} == {c for s in cfg["process"]["capabilities"].values() for c in s}
        info = [r for r in env.log_records() if r.get("msg") == "site policy rewrote config.json"]
        assert 1 == len(info) and 3 == len(info[0]["changes"]), env.log_records()  # type: ignore[arg-type]
        assert 0 == env.run("delete", cid, conf=conf).returncode
        assert [] == leftovers(env, cid)

    def test_without_policy_the_same_container_is_not_hardened(self, user_env: Env,
                                                               conf_dir: Path) -> None:
        """The control: the probe tells the difference (so the test above can fail)."""
        conf = conf_dir / "slurm.conf"
        cid = f"pol{uuid.uuid4().hex[:8]}"
        created = user_env.create(cid, Bundle(_unhardened(user_env, ["sh", "-c", PROBE])),
                                  conf=conf)
        assert 0 == created.rc, created.stderr()
        assert 0 == user_env.run("start", cid, conf=conf).returncode
        assert 0 == created.wait_exit()
        out = created.stdout()
        assert "NoNewPrivs:\t0" in out and "rootfs-writable" in out, out
        assert 0 == user_env.run("delete", cid, conf=conf).returncode


def _add_bind_of_etc(cfg: dict[str, Any]) -> None:
    cfg["mounts"].append({"destination": "/hostetc", "type": "bind", "source": "/etc",
                          "options": ["rbind", "ro"]})


def _add_device(cfg: dict[str, Any]) -> None:
    cfg["linux"]["devices"] = [{"path": "/dev/xnull", "type": "c", "major": 1, "minor": 3}]


def _share_pid_ns(cfg: dict[str, Any]) -> None:
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "pid"]


def _nothing(cfg: dict[str, Any]) -> None:
    pass


REFUSALS: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("capabilities", '[policy]\ncapabilities = ["CAP_KILL"]\ncapabilities_action = "refuse"\n',
     _nothing, "refused by site policy rule capabilities: CAP_AUDIT_WRITE, "
     "CAP_NET_BIND_SERVICE not allowed"),
    ("mounts", '[policy]\nmount_sources = ["{home}", "/tmp"]\n', _add_bind_of_etc,
     "refused by site policy rule mount_sources: bind mount of /etc is not allowed"),
    ("devices", "[policy]\ndevices = []\n", _add_device,
     "refused by site policy rule devices: device /dev/xnull is not allowed"),
    ("namespaces", '[policy]\nprivate_namespaces = ["pid"]\n', _share_pid_ns,
     "refused by site policy rule private_namespaces: the container would share the "
     "host's pid namespace"),
    ("bundles", '[policy]\nbundles = ["/srv/containers"]\n', _nothing,
     "refused by site policy rule bundles: bundle "),
    ("bad-policy-file", "[policy]\nreadonly_rootf = true\n", _nothing,
     "scrun-py.toml: [policy]: unknown key readonly_rootf"),
]


class TestRootJobs:
    def test_root_is_refused_and_the_user_runs(self, env: Env, conf_dir: Path) -> None:
        """allow_root_jobs = false: `create` as root fails with one line naming the rule
        and a JSON error record, and leaves no job; the ordinary user's container runs."""
        (conf_dir / "scrun-py.toml").write_text("[policy]\nallow_root_jobs = false\n")
        conf = conf_dir / "slurm.conf"
        cid = f"root{uuid.uuid4().hex[:8]}"
        jobs_before = set(squeue("-u", env.user.name, "-t", "all", "-o", "%i").split())
        created = env.create(cid, env.bundle(["true"]), conf=conf)
        if env.user.uid != 0:
            assert 0 == created.rc, created.stderr()
            assert 0 == env.run("start", cid, conf=conf).returncode
            assert 0 == created.wait_exit()
            assert 0 == env.run("delete", cid, conf=conf).returncode
            assert [] == leftovers(env, cid)
            return
        message = ("refused by site policy rule allow_root_jobs: the container's job would "
                   "run as root (uid 0); run containers through a rootless engine")
        assert 0 != created.rc
        assert [f"scrun-py: {message}"] == created.stderr().splitlines()
        assert [message] == [r["msg"] for r in env.errors()], env.log_records()
        assert [] == leftovers(env, cid)
        assert set() == set(squeue("-u", "root", "-t", "all", "-o", "%i").split()) - jobs_before


class TestRefusals:
    @pytest.mark.parametrize(("policy", "change", "message"),
                             [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
    def test_refused_with_the_rule_named_and_nothing_left(
            self, user_env: Env, conf_dir: Path, policy: str,
            change: Callable[[dict[str, Any]], None], message: str) -> None:
        env = user_env
        (conf_dir / "scrun-py.toml").write_text(policy)
        bundle = env.bundle(["true"])
        cfg = _config(bundle.path)
        change(cfg)
        (bundle.path / "config.json").write_text(json.dumps(cfg))
        before = (bundle.path / "config.json").read_bytes()
        cid = f"ref{uuid.uuid4().hex[:8]}"
        created = env.create(cid, bundle, conf=conf_dir / "slurm.conf")
        assert 0 != created.rc
        lines = created.stderr().splitlines()
        assert 1 == len(lines) and message in lines[0], lines
        assert any(message in str(r["msg"]) for r in env.errors()), env.log_records()
        assert before == (bundle.path / "config.json").read_bytes()  # refused: untouched
        assert [] == sorted(p.name for p in bundle.path.iterdir() if p.name.startswith("."))
        assert [] == leftovers(env, cid)


# -- docker and rootless podman ------------------------------------------------------------


@contextmanager
def site_policy(text: str) -> Iterator[None]:
    """The engines run scrun-py against their own config dir (scripts/engines.sh): add
    the policy to its scrun-py.toml (its [staging] table) for the duration of one test."""
    path = STATE / "engines" / "conf" / "scrun-py.toml"
    before = path.read_text() if path.exists() else None
    assert "[policy]" not in (before or ""), f"{path}: a policy left behind by another test"
    path.write_text((before or "") + text)
    os.chmod(path, 0o644)
    try:
        yield
    finally:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(before)


@pytest.mark.engines
class TestPolicyThroughEngines:
    def test_hardened_run(self, any_engine: Engine) -> None:  # noqa: F811
        eng = any_engine
        with site_policy('[policy]\nno_new_privileges = true\nreadonly_rootfs = true\n'):
            res = eng.run("--rm", eng.image, "sh", "-c", PROBE)
        assert 0 == res.returncode, res.stderr
        assert "NoNewPrivs:\t1" in res.stdout, res.stdout
        assert "rootfs-readonly" in res.stdout, res.stdout

    def test_forbidden_bind_mount_is_refused(self, any_engine: Engine) -> None:  # noqa: F811
        eng = any_engine
        with site_policy('[policy]\nmount_sources = ["/var/lib/scrun-py-test", "/run", '
                         '"/tmp", "{home}"]\n'):
            res = eng.run("--rm", "-v", "/etc:/hostetc:ro", eng.image, "true")
        assert 0 != res.returncode
        assert "refused by site policy rule mount_sources: bind mount of /etc is not " \
               "allowed" in res.stderr, res.stderr

    def test_root_dockerd_is_refused_rootless_docker_runs(
            self, engines_up: None, rootless_docker: RootlessDocker) -> None:  # noqa: F811
        """allow_root_jobs = false: the root dockerd's `docker run` fails with the rule's
        line and leaves nothing; the user's rootless dockerd, with the same slurm.conf
        and policy, runs the container as the user's job."""
        with site_policy("[policy]\nallow_root_jobs = false\n"):
            for root_docker in _guarded(Engine("docker", User.named("root"))):
                res = root_docker.run("--rm", root_docker.image, "true", timeout=60)
                assert 125 == res.returncode, res.stderr
                assert ("OCI runtime create failed: refused by site policy rule "
                        "allow_root_jobs: the container's job would run as root (uid 0); "
                        "run containers through a rootless engine") in res.stderr
            res = rootless_docker.run("--rm", rootless_docker.image, "sh", "-c",
                                      "echo ran")
        assert (0, "ran\n") == (res.returncode, res.stdout), res.stderr
