"""The anchor's lifecycle through the fake Slurm backend: every transition of the table,
and the failure paths (allocation, stage_in, launch, stage_out, release, a revoked job,
kill/delete/anchor signals in each phase).  No cluster, no subprocess."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scrun_py.anchor import job as job_mod
from scrun_py.anchor import lifecycle
from scrun_py.anchor.lifecycle import Occurrence
from scrun_py.anchor.table import TABLE, Event, Phase
from scrun_py.base import procs
from scrun_py.base.errors import (
    AllocationFailed,
    ContainerNotRunning,
    ContainerStillRunning,
    HookError,
    ScrunError,
    SlurmError,
    StepLaunchFailed,
)
from scrun_py.slurm.backend import StepRequest
from tests.unit.anchor_harness import CID, TIMEOUT_S, Harness, run
from tests.unit.fake_slurm import FakeStep

TRANSITIONS = sorted(TABLE, key=lambda k: (list(Phase).index(k[0]), list(Event).index(k[1])))


class TestTable:
    @pytest.mark.parametrize(("phase", "event"), TRANSITIONS,
                             ids=[f"{p.value}-{e.value}" for p, e in TRANSITIONS])
    def test_transition(self, tmp_path: Path, phase: Phase, event: Event) -> None:
        """Driven into `phase` and given `event` the real way, the lifecycle takes the
        table's transition, and from there still reaches STOPPED."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(phase, event)
            h.trigger(event)
            h.until(lambda: h.took(phase, event), f"{phase} x {event}")
            taken = next(nxt for p, e, nxt in h.lc.trace if p is phase and e is event)
            assert TABLE[phase, event].next is taken
            h.finish()

        run(body)

    def test_every_transition_is_walked(self) -> None:
        """test_transition covers the whole table: each phase has a way in and each event a
        trigger in the harness (a new row without one fails here, not silently)."""
        assert set(TABLE) == set(TRANSITIONS)
        src = Path(__file__).with_name("anchor_harness.py").read_text()
        assert [] == [p for p in Phase if f"Phase.{p.name}" not in src]
        assert [] == [e for e in Event if f"Event.{e.name}" not in src]

    def test_missing_pair_changes_nothing(self, tmp_path: Path) -> None:
        """An event the table has no row for (it cannot happen) is ignored."""
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            assert (None, None) == h.lc.fire(Occurrence(Event.LAUNCHED))
            assert Phase.CREATED is h.lc.phase
            h.finish()

        run(body)


class TestCreate:
    def test_happy_path(self, tmp_path: Path) -> None:
        """create → start → exit 3: state.json, pid file, hooks and the job's end as the
        anchor has always done them."""
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            st = h.state()
            assert ("created", 77, os.getpid()) == (st["status"], st["job_id"],
                                                    st["anchor_pid"])
            assert st["bundle"].endswith("/staged")  # stage_in's set_bundle_path
            assert str(os.getpid()) == h.pid_file.read_text()
            assert ("allocate", ("-p", "debug")) == h.fake.calls[0]
            assert 77 == h.lc.start()
            assert "running" == h.state()["status"]
            assert h.fake.launches[0].bundle.endswith("/staged")
            assert h.fake.step is not None
            h.fake.step.exit(3)
            assert 3 == h.lc.wait_stopped()
            st = h.state()
            assert ("stopped", 3, 0) == (st["status"], st["exit_code"], st["anchor_pid"])
            assert ["stage_in", "stage_out"] == h.hooks.calls
            assert ("release", 3) == h.fake.last()
            assert not h.pid_file.exists()
            assert h.hooks.closed

        run(body)

    def test_allocation_fails(self, tmp_path: Path) -> None:
        """No job: create reports Slurm's error; no hook ran and no trace is left."""
        def body() -> None:
            h = Harness(tmp_path)
            h.fake.fail["allocate"] = AllocationFailed("job allocation failed: bad partition")
            err = h.lc.create()
            assert isinstance(err, AllocationFailed)
            assert [] == h.hooks.calls
            assert not h.dir.exists()
            assert 1 == h.lc.wait_stopped()
            assert ("cancel", 77, None) == h.fake.last()  # the job id Slurm had given

        run(body)

    def test_existing_job(self, tmp_path: Path) -> None:
        """SLURM_JOB_ID: that job is used, never released, and left running."""
        def body() -> None:
            h = Harness(tmp_path, {"SLURM_JOB_ID": "12"})
            h.fake.jobs[12] = "RUNNING"
            h.created()
            assert (12, False) == (h.state()["job_id"], h.state()["owns_job"])
            h.lc.kill(15)
            assert 143 == h.lc.wait_stopped()
            assert [] == [c for c in h.fake.calls if c[0] in ("release", "cancel")]

        run(body)

    def test_existing_job_id_must_be_a_number(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path, {"SLURM_JOB_ID": "12x"})
            err = h.lc.create()
            assert "SLURM_JOB_ID is not a job id: '12x'" == str(err)
            assert not h.dir.exists()

        run(body)

    def test_stage_in_fails(self, tmp_path: Path) -> None:
        """stage_in fails: stage_out still runs (it may undo a half stage_in), the job ends
        with 1 and every trace is removed."""
        def body() -> None:
            h = Harness(tmp_path)
            h.hooks.fail["stage_in"] = HookError("stage_in failed: no space")
            err = h.lc.create()
            assert "stage_in failed: no space" == str(err)
            assert ["stage_in", "stage_out"] == h.hooks.calls
            assert ("release", 1) == h.fake.last()
            assert not h.dir.exists()
            assert not h.pid_file.exists()

        run(body)

    def test_stage_in_hangs_then_anchor_signal(self, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
        """A hung stage_in is interrupted by a signal: no stage_out (the Lua state is
        busy), the hook's commands are killed, the job ends, nothing is left."""
        killed: list[int] = []

        def descendants(pid: int) -> list[int]:
            killed.append(pid)
            return []

        monkeypatch.setattr(procs, "descendants", descendants)

        def body() -> None:
            h = Harness(tmp_path)
            h.hooks.hang.add("stage_in")
            task = h.bg(h.lc.create)
            h.until(lambda: h.hooks.calls == ["stage_in"], "stage_in")
            h.signal_anchor(2)
            task.join(TIMEOUT_S)
            assert "container creation interrupted: anchor signal 2" == str(h.results[0])
            assert ["stage_in"] == h.hooks.calls
            assert [os.getpid()] == killed
            assert not h.hooks.closed
            assert ("release", 1) == h.fake.last()
            assert not h.dir.exists()
            h.hooks.release.set()

        run(body)

    def test_time_limit_during_create(self, tmp_path: Path) -> None:
        """A job whose time limit is already near when stage_in hangs: create fails
        naming the time limit."""
        def body() -> None:
            h = Harness(tmp_path)
            h.fake.end_time = time.time() + lifecycle.TIME_LIMIT_MARGIN_S
            h.hooks.hang.add("stage_in")
            err = h.lc.create()
            assert "container creation interrupted: time limit reached" == str(err)
            h.hooks.release.set()

        run(body)

    def test_job_ends_during_create(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.hooks.hang.add("stage_in")
            task = h.bg(h.lc.create)
            h.until(lambda: h.hooks.calls == ["stage_in"], "stage_in")
            h.fake.ended.set()
            task.join(TIMEOUT_S)
            assert ("container creation interrupted: the job ended while the container "
                    "was being created") == str(h.results[0])
            h.hooks.release.set()

        run(body)

    def test_rootless_uid_comes_from_the_job(self, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """In a user namespace the hooks see the job's uid/gid, not namespace root."""
        monkeypatch.setattr(procs, "in_user_namespace", lambda: True)

        def body() -> None:
            h = Harness(tmp_path)
            h.fake.owner = (1001, 1002)
            h.created()
            assert h.container.ctx is not None
            assert (1001, 1002) == (h.container.ctx.user_id, h.container.ctx.group_id)
            assert "1001" == h.container.ctx.env["SCRUN_USER_ID"]
            h.finish()

        run(body)


class TestStart:
    def test_start_twice_at_once(self, tmp_path: Path) -> None:
        """Two starts while the step launches: one launch, both answer the job id."""
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            h.fake.hold("launch_step")
            first, second = h.bg(h.lc.start), h.bg(h.lc.start)
            h.until(lambda: h.lc.phase is Phase.STARTING)
            h.fake.open("launch_step")
            first.join(TIMEOUT_S)
            second.join(TIMEOUT_S)
            assert [77, 77] == h.results
            assert 1 == h.fake.names().count("launch_step")
            assert 77 == h.lc.start()  # a third, once running
            h.finish()

        run(body)

    def test_start_while_creating_and_after_stop(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.CREATING)
            with pytest.raises(ScrunError, match="still being created"):
                h.lc.start()
            h.finish()
            with pytest.raises(ScrunError, match="cannot start a container that has stopped"):
                h.lc.start()

        run(body)

    def test_launch_fails(self, tmp_path: Path) -> None:
        """srun cannot run: start reports why, the container stops with 1."""
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            h.fake.fail["launch_step"] = StepLaunchFailed("cannot run srun: not found")
            with pytest.raises(StepLaunchFailed, match="cannot run srun"):
                h.lc.start()
            assert 1 == h.lc.wait_stopped()
            assert ("stopped", 1) == (h.state()["status"], h.state()["exit_code"])

        run(body)

    def test_stop_while_launching_kills_the_step(self, tmp_path: Path) -> None:
        """A kill while srun starts: once launched, the step is killed (SIGKILL)."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.STARTING)
            h.lc.kill(15)
            h.fake.open("launch_step")
            assert 137 == h.lc.wait_stopped()
            assert [("signal", 9)] == [c for c in h.fake.calls if c[0] == "signal"]

        run(body)


class TestKill:
    @pytest.mark.parametrize(("sig", "code"), [(15, 143), (9, 137), (1, 129), (10, 138)])
    def test_created_fatal_signal_stops_it(self, tmp_path: Path, sig: int, code: int) -> None:
        """As runc: a created container dies of a signal whose default action ends a
        process: stopped with 128+N, stage_out ran, the job ended with that code."""
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            h.lc.kill(sig)
            assert code == h.lc.wait_stopped()
            assert ("stopped", code) == (h.state()["status"], h.state()["exit_code"])
            assert ["stage_in", "stage_out"] == h.hooks.calls
            assert ("release", code) == h.fake.last()
            assert h.dir.exists()  # kill is not delete

        run(body)

    @pytest.mark.parametrize("sig", [0, 17, 18, 23, 28, 19, 20])
    def test_created_harmless_signal_is_a_no_op(self, tmp_path: Path, sig: int) -> None:
        """0 and default-ignored (CHLD, CONT, URG, WINCH) or stop signals: still created."""
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            h.lc.kill(sig)
            assert (Phase.CREATED, "created") == (h.lc.phase, h.state()["status"])
            h.finish()

        run(body)

    def test_running_signal_reaches_the_container(self, tmp_path: Path) -> None:
        """USR1 is delivered and the container decides (here: it traps and goes on);
        signal 0 asks nothing of Slurm."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            h.fake.ignore_signals = True
            h.lc.kill(10)
            h.lc.kill(0)
            assert [("signal", 10)] == [c for c in h.fake.calls if c[0] == "signal"]
            assert Phase.RUNNING is h.lc.phase
            assert 0 == h.state()["step_id"]
            h.fake.ignore_signals = False
            h.lc.kill(15)
            assert 143 == h.lc.wait_stopped()

        run(body)

    def test_stopped_is_not_running(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.STOPPED)
            with pytest.raises(ContainerNotRunning):
                h.lc.kill(15)

        run(body)


class TestDelete:
    def test_created(self, tmp_path: Path) -> None:
        """delete of a created container (runc kills and deletes it): the job ends, the
        container dir is gone."""
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            h.lc.delete(False)
            assert 137 == h.lc.wait_stopped()
            assert not h.dir.exists()
            assert ("release", 137) == h.fake.last()

        run(body)

    def test_running_without_force_is_refused(self, tmp_path: Path) -> None:
        """runc's message, and nothing happens to the container."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            with pytest.raises(ContainerStillRunning) as info:
                h.lc.delete(False)
            assert f"cannot delete container {CID} that is not stopped: running" == str(
                info.value)
            assert (Phase.RUNNING, "running") == (h.lc.phase, h.state()["status"])
            assert "signal" not in h.fake.names()
            h.finish()

        run(body)

    def test_running_with_force(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            h.lc.delete(True)
            assert 137 == h.lc.wait_stopped()
            assert not h.dir.exists()
            assert ("signal", 9) in h.fake.calls

        run(body)

    def test_force_when_the_runtime_cannot_kill(self, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
        """The step survives SIGKILL through the runtime: after the grace period the step
        is cancelled and srun killed."""
        monkeypatch.setattr(lifecycle, "KILL_GRACE_S", 0.05)

        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            h.fake.ignore_signals = True
            h.lc.delete(True)
            assert ("cancel", 77, 0) in h.fake.calls
            assert 137 == h.lc.result

        run(body)

    def test_stopped(self, tmp_path: Path) -> None:
        """delete and delete --force of a stopped container are not refused, return at
        once and change nothing: still stopped with its exit code, the stopped record
        kept, no Slurm call and no hook run again."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.STOPPED)
            record = h.state()
            calls, hooks = list(h.fake.calls), list(h.hooks.calls)
            h.lc.delete(False)
            h.lc.delete(True)
            assert [(Phase.STOPPED, Event.DELETE, Phase.STOPPED),
                    (Phase.STOPPED, Event.DELETE_FORCE, Phase.STOPPED)] == h.lc.trace[-2:]
            assert (Phase.STOPPED, 143) == (h.lc.phase, h.lc.wait_stopped())
            assert ("stopped", 143) == (record["status"], record["exit_code"])
            assert record == h.state()
            assert (calls, hooks) == (h.fake.calls, h.hooks.calls)

        run(body)

    def test_during_stop_removes_the_dir(self, tmp_path: Path) -> None:
        """docker: `delete` while the container is stopping, then `delete --force`."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.STOPPING, Event.CLEANED)
            h.bg(lambda: h.lc.delete(False))
            h.until(lambda: h.took(Phase.STOPPING, Event.DELETE))
            h.fake.open("release")
            h.lc.wait_stopped()
            assert not h.dir.exists()

        run(body)


class TestAnchorSignal:
    def test_created(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            h.signal_anchor(15)
            assert 143 == h.lc.wait_stopped()
            assert ["stage_in", "stage_out"] == h.hooks.calls

        run(body)

    def test_running_kills_the_container(self, tmp_path: Path) -> None:
        """The exit code is the container's (here it dies of the SIGKILL)."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            h.signal_anchor(15)
            assert 137 == h.lc.wait_stopped()
            assert ("stopped", 137) == (h.state()["status"], h.state()["exit_code"])

        run(body)

    def test_second_signal_skips_stage_out(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            h.fake.ignore_signals = True
            h.signal_anchor(15)
            h.until(lambda: h.lc.phase is Phase.STOPPING)
            h.signal_anchor(15)
            h.until(lambda: h.took(Phase.STOPPING, Event.ANCHOR_SIGNAL))
            assert h.fake.step is not None
            h.fake.step.exit(-9)
            assert 137 == h.lc.wait_stopped()
            assert ["stage_in"] == h.hooks.calls

        run(body)


class TestJobAndStep:
    def test_job_revoked_under_a_running_step(self, tmp_path: Path) -> None:
        """scancel while the step runs: srun exits 0 without the task's status; the
        container is reported killed (137), stage_out still runs."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            h.fake.revoked_flag = True
            h.fake.ended.set()
            assert h.fake.step is not None
            h.fake.step.exit(0)
            assert 137 == h.lc.wait_stopped()
            assert ["stage_in", "stage_out"] == h.hooks.calls

        run(body)

    def test_job_ends_before_start(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.created()
            h.fake.ended.set()
            assert 1 == h.lc.wait_stopped()
            assert "job ended before the container started" == h.lc.stop_reason

        run(body)

    def test_stage_out_fails(self, tmp_path: Path) -> None:
        """stage_out's failure is logged only: the exit code stays the container's."""
        def body() -> None:
            h = Harness(tmp_path)
            h.hooks.fail["stage_out"] = HookError("stage_out failed")
            h.drive(Phase.RUNNING)
            assert h.fake.step is not None
            h.fake.step.exit(5)
            assert 5 == h.lc.wait_stopped()
            assert ("stopped", 5) == (h.state()["status"], h.state()["exit_code"])
            assert ("release", 5) == h.fake.last()

        run(body)

    def test_release_fails(self, tmp_path: Path) -> None:
        def body() -> None:
            h = Harness(tmp_path)
            h.fake.fail["release"] = SlurmError("salloc did not exit")
            h.drive(Phase.RUNNING)
            assert h.fake.step is not None
            h.fake.step.exit(-15)
            assert 143 == h.lc.wait_stopped()
            assert "stopped" == h.state()["status"]

        run(body)

    def test_time_limit_while_running(self, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        """Near the time limit: TERM through the runtime, then KILL after the grace."""
        monkeypatch.setattr(lifecycle, "TIME_LIMIT_GRACE_S", 0.05)
        monkeypatch.setattr(lifecycle, "TIME_LIMIT_MARGIN_S", 0.0)

        def body() -> None:
            h = Harness(tmp_path)
            h.fake.end_time = time.time() + 0.3
            h.drive(Phase.RUNNING)
            h.fake.ignore_signals = True
            h.until(lambda: ("signal", 15) in h.fake.calls, "TERM")
            h.until(lambda: ("signal", 9) in h.fake.calls, "KILL")
            assert h.fake.step is not None
            h.fake.step.exit(-9)
            assert 137 == h.lc.wait_stopped()

        run(body)

    def test_abandon_script(self, tmp_path: Path) -> None:
        """Once the step runs, the holder's on-abandon script is the backend's."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            script = h.dir / "on-abandon.sh"
            h.until(script.exists, "on-abandon.sh")
            assert "kill-container 77 0\n" == script.read_text()
            h.finish()

        run(body)

    def test_job_env(self, tmp_path: Path) -> None:
        """The step sees the job environment plus the SCRUN_* output variables."""
        def body() -> None:
            h = Harness(tmp_path)
            h.drive(Phase.RUNNING)
            env = h.fake.launches[0].env
            assert ("77", CID, str(h.dir)) == (env["SLURM_JOB_ID"], env["SCRUN_CONTAINER_ID"],
                                               env["SCRUN_SPOOL_DIR"])
            h.finish()

        run(body)


class TestStepNotCreated:
    """srun could not create the step because slurmctld did not answer (it was
    restarting): the container never ran, so the step is launched again."""

    @staticmethod
    def _failing_first_launch(h: Harness, reason: str, retry: bool = True) -> None:
        launch = h.fake.launch_step

        def launch_step(req: StepRequest) -> FakeStep:
            step = launch(req)
            if len(h.fake.launches) == 1:
                step.exit(1, not_created=reason, retry=retry)
            return step

        h.fake.launch_step = launch_step  # type: ignore[method-assign]

    def test_launched_again(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(job_mod, "STEP_RETRY_PAUSE_S", 0.01)

        def body() -> None:
            h = Harness(tmp_path)
            self._failing_first_launch(h, "Connection reset by peer")
            h.drive(Phase.RUNNING)
            h.until(lambda: len(h.fake.launches) == 2, "the second launch")
            assert h.fake.step is not None
            h.fake.step.exit(0)
            assert 0 == h.lc.wait_stopped()

        run(body)

    def test_other_failures_are_final(self, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(job_mod, "STEP_RETRY_PAUSE_S", 0.01)

        def body() -> None:
            h = Harness(tmp_path)
            self._failing_first_launch(h, "Requested node configuration is not available",
                                       retry=False)
            h.drive(Phase.RUNNING)
            assert 1 == h.lc.wait_stopped()
            assert 1 == len(h.fake.launches)

        run(body)

    def test_kill_while_relaunching(self, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
        """A TERM between the failed launch and the next: the container never runs and
        stops as killed (143)."""
        monkeypatch.setattr(job_mod, "STEP_RETRY_PAUSE_S", 0.3)

        def body() -> None:
            h = Harness(tmp_path)
            self._failing_first_launch(h, "Connection refused")
            h.drive(Phase.RUNNING)
            time.sleep(0.1)
            h.lc.kill(15)
            assert 143 == h.lc.wait_stopped()
            assert 1 == len(h.fake.launches)

        run(body)
