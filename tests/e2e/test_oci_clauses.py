"""The clauses of the OCI runtime spec (runtime.md "State", "Operations", config.md) and of
runtime-tools' command-line-interface document that the OCI runtime-tools validation tests
(create start state kill kill_no_effect killsig delete pidfile misc_props) check, on the
real cluster and driven with runc's argv, as those tests drive a runtime.  Each test names
its clause.  The suite itself is not needed: scripts/runtime-tools.sh runs it side by side
with runc when a built checkout is at hand (docs/differences.md).  The unit-level half:
tests/unit/test_oci_clauses.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from tests.e2e.conftest import (
    STATE,
    Bundle,
    Env,
    leftovers,
    run_in_work,
    slurm_release,
    wait_status,
)

pytestmark = pytest.mark.e2e


def _edit(bundle: Bundle, **changes: object) -> None:
    cfg = bundle.config()
    cfg.update(changes)
    bundle.config_file.write_text(json.dumps(cfg))


def _writable(bundle: Bundle) -> Bundle:
    """The rootfs writable (the bundles are made read-only), as the suite's are."""
    _edit(bundle, root={"path": "rootfs", "readonly": False})
    return bundle


class TestState:
    def test_fields_and_status_through_the_lifecycle(self, env: Env) -> None:
        """runtime.md "State": ociVersion (the bundle's), id, status created → running →
        stopped, pid (the pid file's, while created or running; 0 once stopped, as runc),
        bundle (absolute), annotations (config.md: unknown keys kept, no error); an unknown
        top-level property is no error either (config.md "Extensibility")."""
        bundle = env.bundle(["sleep", "300"],
                            annotations={"org.example.unknown-key": "", "a": "1"})
        _edit(bundle, unknownProperty="unknown")
        created = env.create("st", bundle)
        assert 0 == created.rc, created.stderr()
        doc = env.state("st")
        assert {"ociVersion": bundle.config()["ociVersion"], "id": "st", "status": "created",
                "pid": int(created.pid_file.read_text()), "bundle": str(bundle.path),
                "annotations": {"org.example.unknown-key": "", "a": "1"}}.items() <= doc.items()
        assert bundle.path.is_absolute()
        assert 0 == env.run("start", "st").returncode
        running = wait_status(env, "st", "running")
        assert doc["pid"] == running["pid"]
        subprocess.run(env.cmd("kill", "st", "KILL"), env=env.user.env(), check=True,
                       capture_output=True, timeout=60)
        assert 137 == created.wait_exit()
        stopped = env.state("st")
        assert ("stopped", 0) == (stopped["status"], stopped["pid"])
        assert {k: v for k, v in doc.items() if k not in ("status", "pid")} == {
            k: v for k, v in stopped.items() if k not in ("status", "pid")}
        assert 0 == env.run("delete", "st").returncode
        gone = run_in_work(env, "state", "st")
        assert (1, "container does not exist") == (gone.returncode,
                                                   gone.stderr.strip().split(": ", 1)[1])


class TestStart:
    def test_process_runs_on_start_only_and_once(self, env: Env) -> None:
        """runtime.md: process.args MUST NOT be applied until start; start MUST run the
        program; start of a container that is not created MUST fail and have no effect."""
        bundle = _writable(env.bundle(["sh", "-c", "echo 'process called' >> /output"]))
        output = bundle.path / "rootfs" / "output"
        created = env.create("s", bundle)
        assert 0 == created.rc, created.stderr()
        time.sleep(1)
        assert not output.exists()
        assert 0 == env.run("start", "s").returncode
        assert 0 == created.wait_exit()
        res = run_in_work(env, "start", "s")
        assert 1 == res.returncode
        assert "cannot start a container that has stopped" in res.stderr
        time.sleep(1)
        assert "process called\n" == output.read_text()
        assert "stopped" == env.state("s")["status"]
        assert 0 == env.run("delete", "s").returncode


class TestKill:
    @pytest.mark.parametrize("sig", ["TERM", "USR1", "USR2"])
    def test_the_named_signal_reaches_the_container_process(self, env: Env, sig: str) -> None:
        """runtime.md "kill": the signal MUST be sent to the container process (its trap
        runs in the container: the file appears in the rootfs)."""
        bundle = _writable(env.bundle(["sh", "-c", f"trap 'touch /{sig}; exit 0' {sig}; "
                                       "while :; do sleep 0.1; done"]))
        created = env.create("ks", bundle)
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "ks").returncode
        wait_status(env, "ks", "running")
        time.sleep(0.5)
        res = env.run("kill", "ks", sig)
        assert (0, "") == (res.returncode, res.stderr)
        assert 0 == created.wait_exit(timeout=60)
        assert (bundle.path / "rootfs" / sig).exists()
        assert 0 == env.run("delete", "ks").returncode

    def test_created_then_stopped(self, env: Env) -> None:
        """kill KILL of a created container ends it (runc, runtime-tools' kill case 3);
        then kill of the stopped container MUST fail and MUST have no effect: `state`
        prints the same document before and after (kill_no_effect)."""
        created = env.create("kc", env.bundle(["true"]))
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("kill", "kc", "KILL").returncode
        assert 137 == created.wait_exit()
        before = env.state("kc")
        assert ("stopped", 0) == (before["status"], before["pid"])
        for sig in ("KILL", "TERM"):
            res = run_in_work(env, "kill", "kc", sig)
            assert (1, "container not running") == (res.returncode,
                                                    res.stderr.strip().split(": ", 1)[1])
            assert before == env.state("kc")
        assert 0 == env.run("delete", "kc").returncode
        assert [] == leftovers(env, "kc", [job])


class TestDelete:
    def test_running_is_refused_and_unaffected(self, env: Env) -> None:
        """runtime.md "delete": deleting a container that is not stopped MUST fail and MUST
        have no effect (runc's words); once stopped it is deleted and `state` then fails."""
        created = env.create("dr", env.bundle(["sleep", "300"]))
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "dr").returncode
        before = wait_status(env, "dr", "running")
        res = run_in_work(env, "delete", "dr")
        assert 1 == res.returncode
        assert "cannot delete container dr that is not stopped: running" in res.stderr
        time.sleep(1)
        assert before == env.state("dr")
        assert 0 == env.run("kill", "dr", "KILL").returncode
        assert 137 == created.wait_exit()
        assert 0 == env.run("delete", "dr").returncode
        assert 1 == run_in_work(env, "state", "dr").returncode


class TestConfig:
    @pytest.mark.parametrize("version", ["invalid", "2.0.0"])
    def test_invalid_or_unsupported_oci_version_is_refused(self, env: Env,
                                                           version: str) -> None:
        """config.md: a runtime MUST generate an error for an invalid or unsupported value
        (runtime-tools' misc_props sets ociVersion "invalid"): one line, nothing made."""
        bundle = env.bundle(["true"])
        _edit(bundle, ociVersion=version)
        res = run_in_work(env, "create", "--bundle", str(bundle.path), "v")
        assert 1 == res.returncode
        assert [f"scrun-py: bundle {bundle.path}: config.json: ociVersion {version!r} "
                f"is not {'a SemVer 2.0.0 version' if version == 'invalid' else 'supported'}"
                ] == [ln.split(" (only")[0] for ln in res.stderr.splitlines()]
        assert env.errors()
        assert not (env.root / "v").exists()


def _node_crun_version() -> tuple[int, int] | None:
    """(major, minor) of crun when the cluster's oci.conf runs crun, else None."""
    conf = (STATE / "oci.conf").read_text() if (STATE / "oci.conf").exists() else ""
    if not re.search(r'^RunTimeRun="(?:exec )?crun ', conf, re.M) or not shutil.which("crun"):
        return None
    out = subprocess.run(["crun", "--version"], capture_output=True, text=True,
                         timeout=30).stdout
    m = re.search(r"crun version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


class TestNodeLimits:
    """What the compute node's side (slurmstepd, the runtime oci.conf names) does with the
    runtime-tools bundles, shown here; docs/differences.md, "OCI runtime-tools validation"."""

    @pytest.mark.parametrize("root", [".", "other"])
    def test_slurm_2205_start_refuses_a_root_path_it_would_not_run(self, env: Env,
                                                                 root: str) -> None:
        """Slurm 22.05's slurmstepd runs the container from BUNDLE/rootfs whatever
        root.path says: a bundle that is its own rootfs (root.path ".", as runtime-tools
        makes them) would fail on the node, and one whose root.path names another
        directory would silently run BUNDLE/rootfs.  `start` refuses both with one line
        before any step runs; the container stops with 1 (a failed start)."""
        release = slurm_release()
        if release != (22, 5):
            pytest.skip(f"22.05 only: Slurm {release[0]}.{release[1]:02d} runs root.path")
        bundle = _writable(env.bundle(["sh", "-c", "echo ran > /output"]))
        rootfs = bundle.path / "rootfs"
        if root == ".":
            for entry in rootfs.iterdir():
                entry.rename(bundle.path / entry.name)
            rootfs.rmdir()
        else:
            shutil.copytree(rootfs, bundle.path / root, symlinks=True)
            env.chown(bundle.path)
        _edit(bundle, root={"path": root, "readonly": False})
        created = env.create("r", bundle)
        assert 0 == created.rc, created.stderr()
        assert str((bundle.path / root).resolve()) == env.state("r")["rootfs"]
        res = run_in_work(env, "start", "r")
        assert (1, [f"scrun-py: bundle {bundle.path}: Slurm 22.05 runs the container from "
                    f"{bundle.path}/rootfs, not from root.path {root!r}"]) == (
            res.returncode, res.stderr.splitlines())
        assert 1 == created.wait_exit()
        assert "stopped" == env.state("r")["status"]
        assert [] == [p for p in bundle.path.rglob("output")]
        assert 0 == env.run("delete", "r").returncode

    def test_crun_18_refuses_spec_1_3(self, env: Env) -> None:
        """crun 1.8 runs only configs whose ociVersion is 1.0.x ("unknown version
        specified"; runc 1.1 takes 1.3.0): create and start succeed, the container stops
        with status 1."""
        version = _node_crun_version()
        # a node without crun is a failure under CI=true (scripts/cluster.sh up installs it)
        if version is None:
            pytest.skip("the cluster's oci.conf does not run crun, or crun is not installed")
        if version != (1, 8):
            pytest.skip(f"the node's runtime is crun {version[0]}.{version[1]}, not crun 1.8")
        bundle = _writable(env.bundle(["sh", "-c", "echo ran > /output"]))
        _edit(bundle, ociVersion="1.3.0")
        created = env.create("v13", bundle)
        assert 0 == created.rc, created.stderr()
        assert "1.3.0" == env.state("v13")["ociVersion"]
        assert 0 == env.run("start", "v13").returncode
        assert 1 == created.wait_exit()
        assert "unknown version specified" in created.stderr()
        assert not (bundle.path / "rootfs" / "output").exists()
        assert 0 == env.run("delete", "v13").returncode
