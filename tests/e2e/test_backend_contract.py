"""The backend contract suite (tests/backend_contract.py) against the real cluster: the CLI
backend, and the pyslurm backend where pyslurm is installed for the release under test
(scripts/pyslurm.sh; required there under CI=true).  Then the two side by side on the
same jobs: what pyslurm answers must be what the client commands answer.

The backends run in this (root) process, as an anchor runs them.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrun_py.base.errors import AllocationFailed
from scrun_py.base.threads import Cancel
from scrun_py.slurm import choice
from scrun_py.slurm.backend import AllocRequest, SlurmBackend, StepRequest
from scrun_py.slurm.cli_backend import CliSlurm, client_release
from scrun_py.slurm.pyslurm_api import PyslurmApi
from scrun_py.slurm.pyslurm_backend import PyslurmSlurm
from tests.backend_contract import TIME_LIMIT_MIN, BackendContract, end
from tests.e2e.conftest import SLURM_CONF, make_rootfs, slurm_env

pytestmark = pytest.mark.e2e
UNKNOWN_JOB = 67_000_000  # above every cluster's job ids (below Slurm's MaxJobId)


def pyslurm_api() -> PyslurmApi:
    """pyslurm for this cluster, or a skip (a failure under CI=true when the release
    under test is one pyslurm is installed for: scripts/pyslurm.sh)."""
    try:
        chosen = choice.choose("pyslurm", str(SLURM_CONF), client_release)
    except Exception as exc:
        if os.environ.get("CI") == "true" and os.environ.get("SCRUN_TEST_PYSLURM") == "1":
            pytest.fail(f"pyslurm is required here: {exc}")
        pytest.skip(f"no pyslurm for this cluster: {exc}")
    assert chosen.api is not None
    return chosen.api


class RealWorld:
    def __init__(self, backend: SlurmBackend, work: Path) -> None:
        self.backend = backend
        self.owner = (os.getuid(), os.getgid())
        self.unknown_job = UNKNOWN_JOB
        self.work = work
        self._null = os.open(os.devnull, os.O_RDWR)

    def close(self) -> None:
        os.close(self._null)

    def alloc_opts(self) -> list[str]:
        return [f"--time={TIME_LIMIT_MIN}"]

    def env(self) -> dict[str, str]:
        return slurm_env(HOME="/root")

    def step_request(self, job_id: int) -> StepRequest:
        bundle = self.work / f"bundle-{job_id}"
        bundle.mkdir()
        make_rootfs(bundle / "rootfs")
        subprocess.run(["crun", "spec", "--rootless"], cwd=bundle, check=True, timeout=30)
        cfg = json.loads((bundle / "config.json").read_text())
        cfg["process"].update(args=self._args(job_id), terminal=False)
        # no pid namespace: sleep is not an init there, so TERM's default action ends it
        cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"]
                                      if n["type"] != "pid"]
        cfg["mounts"] = [m for m in cfg["mounts"] if m.get("type") != "proc"]
        (bundle / "config.json").write_text(json.dumps(cfg))
        return StepRequest(job_id=job_id, container_id=f"contract{job_id}", bundle=str(bundle),
                           args=self._args(job_id), env=self.env(),
                           stdio=(self._null, self._null, self._null))

    @staticmethod
    def _args(job_id: int) -> list[str]:
        return ["sleep", f"6{job_id}"]  # a command line only this job's container has

    def wait_container(self, job_id: int) -> None:
        name, arg = self._args(job_id)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                try:
                    argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
                except OSError:
                    continue
                # the runtime runs it as /usr/bin/sleep
                if argv[-1:] == [arg.encode()] and argv[0].endswith(name.encode()):
                    return
            time.sleep(0.05)
        raise AssertionError(f"the container of job {job_id} did not start")


def _world(backend: SlurmBackend, tmp_path: Path) -> Iterator[RealWorld]:
    os.chmod(tmp_path, 0o755)
    world = RealWorld(backend, tmp_path)
    yield world
    world.close()


class TestCliContract(BackendContract):
    @pytest.fixture
    def world(self, cluster: Path, tmp_path: Path) -> Iterator[RealWorld]:
        # no RunTimeKill: the signal goes the way it would without one (scancel)
        yield from _world(CliSlurm(), tmp_path)


class TestPyslurmContract(BackendContract):
    @pytest.fixture
    def world(self, cluster: Path, tmp_path: Path) -> Iterator[RealWorld]:
        api = pyslurm_api()
        fallbacks: list[dict[str, Any]] = []
        backend = PyslurmSlurm(CliSlurm(), lambda: api, lambda msg, **f: fallbacks.append(f))
        yield from _world(backend, tmp_path)
        # every call went through pyslurm: a fallback would hide a broken pyslurm path
        assert [] == fallbacks


class TestSideBySide:
    """The same questions about the same jobs, to both backends."""

    def test_same_answers(self, cluster: Path, tmp_path: Path) -> None:
        api = pyslurm_api()
        cli = CliSlurm()
        fallbacks: list[dict[str, Any]] = []
        py = PyslurmSlurm(CliSlurm(), lambda: api, lambda msg, **f: fallbacks.append(f))
        os.chmod(tmp_path, 0o755)
        world = RealWorld(cli, tmp_path)
        alloc = cli.allocate(AllocRequest(world.alloc_opts(), world.env(), lambda _j: None, 120),
                             Cancel())
        step = None
        try:
            assert cli.job_info(alloc.job_id) == py.job_info(alloc.job_id)
            assert (cli.attach(alloc.job_id, {}).owned, py.attach(alloc.job_id, {}).owned) == (
                False, False)
            step = cli.launch_step(world.step_request(alloc.job_id))

            def alive() -> bool:
                return step is not None and step.returncode is None

            assert cli.step_id(alloc.job_id, alive) == py.step_id(alloc.job_id, alive)
            assert cli.job_info(UNKNOWN_JOB) is py.job_info(UNKNOWN_JOB) is None
            errors = []
            for backend in (cli, py):
                with pytest.raises(AllocationFailed) as info:
                    backend.attach(UNKNOWN_JOB, {})
                errors.append(str(info.value).split(" (")[0])
            assert errors[0] == errors[1]
        finally:
            if step is not None:
                step.kill()
                step.wait(60)
            end(world, alloc)
            world.close()
        assert [] == fallbacks
