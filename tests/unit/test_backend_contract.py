"""The backend contract suite (tests/backend_contract.py) against FakeSlurm, the
in-process Slurm of the anchor's unit tests: the fake behaves as the real backends do
(tests/e2e/test_backend_contract.py runs the same suite against them)."""

from __future__ import annotations

import os
import time

import pytest

from scrun_py.slurm.backend import StepRequest
from tests.backend_contract import TIME_LIMIT_MIN, BackendContract
from tests.unit.fake_slurm import FakeSlurm, as_backend


class FakeWorld:
    def __init__(self) -> None:
        self.fake = FakeSlurm(job_id=4711)
        self.backend = as_backend(self.fake)
        self.owner = (os.getuid(), os.getgid())
        self.fake.owner = self.owner
        # what Slurm would report for a job with this time limit
        self.fake.end_time = time.time() + TIME_LIMIT_MIN * 60
        self.unknown_job = 999999

    def alloc_opts(self) -> list[str]:
        return [f"--time={TIME_LIMIT_MIN}"]

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin"}

    def step_request(self, job_id: int) -> StepRequest:
        return StepRequest(job_id=job_id, container_id="contract", bundle="/nonexistent",
                           args=["sleep", "600"], env=self.env())

    def wait_container(self, job_id: int) -> None:
        assert self.fake.step is not None  # FakeStep "runs" once launched


class TestFakeSlurmContract(BackendContract):
    @pytest.fixture
    def world(self) -> FakeWorld:
        return FakeWorld()
