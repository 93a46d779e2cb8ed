"""The Slurm backend contract (scrun_py/slurm/backend.py) as one suite of tests, run
against every implementation: FakeSlurm in-process (tests/unit/test_backend_contract.py),
the CLI backend and the pyslurm backend on the real cluster
(tests/e2e/test_backend_contract.py).

A test class inherits `BackendContract` and provides the fixture `world`: a backend and
what the test needs to know of its Slurm.  Every check goes through the interface only.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import signal
import threading
import time
from typing import Protocol

import pytest

from scrun_py.base.errors import AllocationFailed
from scrun_py.base.threads import Cancel
from scrun_py.slurm.backend import Allocation, AllocRequest, SlurmBackend, Step, StepRequest

TIME_LIMIT_MIN = 10  # the job's time limit the suite asks for
STEP_WAIT_S = 60.0


class World(Protocol):
    backend: SlurmBackend
    owner: tuple[int, int]  # uid and gid the jobs run as
    unknown_job: int  # a job id this Slurm does not know

    def alloc_opts(self) -> list[str]:
        """Job options asking for a TIME_LIMIT_MIN-minute time limit."""

    def env(self) -> dict[str, str]:
        """The environment allocate and attach are given."""

    def step_request(self, job_id: int) -> StepRequest:
        """A container step that runs until it is signalled."""

    def wait_container(self, job_id: int) -> None:
        """Until the container of step_request(job_id) runs (a signal through Slurm that
        comes before it is lost: slurmstepd has no task to deliver it to yet)."""


def allocate(world: World) -> tuple[Allocation, list[int]]:
    heard: list[int] = []
    alloc = world.backend.allocate(
        AllocRequest(world.alloc_opts(), world.env(), heard.append, 120), Cancel())
    return alloc, heard


def end(world: World, alloc: Allocation, code: int = 0) -> None:
    """Release the job; wait_ended must then return (bounded, for a broken backend)."""
    world.backend.release(alloc, code, 60)
    cancel = Cancel()
    waiter = threading.Thread(target=world.backend.wait_ended, args=(alloc, cancel),
                              daemon=True)
    waiter.start()
    waiter.join(STEP_WAIT_S)
    cancel.set()
    assert not waiter.is_alive(), "wait_ended did not return after release"


class BackendContract:
    def test_allocate_and_release(self, world: World) -> None:
        """A new job: owned, its id heard at once and in its environment; not revoked while
        it runs; wait_ended returns once it is released."""
        alloc, heard = allocate(world)
        try:
            assert 0 < alloc.job_id
            assert ([alloc.job_id], True, str(alloc.job_id)) == (
                heard, alloc.owned, alloc.env.get("SLURM_JOB_ID"))
            assert not world.backend.revoked(alloc)
        finally:
            end(world, alloc)

    def test_job_info(self, world: World) -> None:
        """End time (the time limit asked for) and owner of a running job; None for a job
        Slurm does not know."""
        alloc, _ = allocate(world)
        try:
            info = world.backend.job_info(alloc.job_id)
            assert info is not None
            assert world.owner == (info.uid, info.gid)
            assert info.end_time is not None
            left = info.end_time - time.time()
            assert 0 < left <= TIME_LIMIT_MIN * 60 + 5, left
        finally:
            end(world, alloc)
        assert world.backend.job_info(world.unknown_job) is None

    def test_attach(self, world: World) -> None:
        """A running job can be attached to (not owned); an unknown one and a cancelled
        one cannot."""
        with pytest.raises(AllocationFailed, match=f"SLURM_JOB_ID={world.unknown_job} is not"):
            world.backend.attach(world.unknown_job, world.env())
        alloc, _ = allocate(world)
        try:
            attached = world.backend.attach(alloc.job_id, world.env())
            assert (alloc.job_id, False) == (attached.job_id, attached.owned)
            world.backend.cancel(alloc.job_id)
            deadline = time.monotonic() + STEP_WAIT_S
            while True:  # slurmctld may take a moment to end the job
                try:
                    world.backend.attach(alloc.job_id, world.env())
                except AllocationFailed:
                    break
                assert time.monotonic() < deadline, "attach still works after cancel"
                time.sleep(0.2)
        finally:
            end(world, alloc)

    def test_cancel_unknown_job(self, world: World) -> None:
        """Cancelling a job (or step) Slurm does not know is not an error (no exception)
        and makes no job: Slurm still does not know it."""
        world.backend.cancel(world.unknown_job)
        world.backend.cancel(world.unknown_job, 0)
        assert world.backend.job_info(world.unknown_job) is None

    def test_step_id_signal_cancel(self, world: World) -> None:
        """The container step: its id once it runs; a TERM ends it; cancelling the step
        afterwards is not an error."""
        alloc, _ = allocate(world)
        step: Step | None = None
        try:
            step = world.backend.launch_step(world.step_request(alloc.job_id))

            def alive() -> bool:
                return step is not None and step.returncode is None

            step_id = world.backend.step_id(alloc.job_id, alive)
            assert step_id is not None and 0 <= step_id
            world.wait_container(alloc.job_id)
            world.backend.signal(alloc.job_id, step_id, int(signal.SIGTERM), alloc.env, alive)
            assert step.wait(STEP_WAIT_S) is not None, "the step outlived TERM"
            world.backend.cancel(alloc.job_id, step_id)
        finally:
            if step is not None and step.returncode is None:
                step.kill()
                step.wait(STEP_WAIT_S)
            end(world, alloc)

    def test_helper_argvs(self, world: World) -> None:
        """A command on every node is an argv of strings that names the job and ends with
        the command (the shell's script: the PATH prologue, then the command); the abandon
        script is one line that names the job, or None."""
        job = 424242
        argv = world.backend.command_argv(job, "true")
        assert argv and all(isinstance(a, str) for a in argv)
        assert argv[-1].endswith("true") and argv[-1].split(";")[-1].strip() == "true", argv
        assert any(str(job) in a for a in argv[:-1]), argv
        kill = world.backend.abandon_script(Allocation(job, {}, True), 0)
        if kill is not None:
            assert kill.endswith("\n") and "\n" not in kill[:-1], kill
            assert str(job) in kill, kill
