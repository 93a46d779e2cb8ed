"""A Lifecycle wired to the fake Slurm backend and fake hooks, in a temporary --root,
with helpers to drive it into each phase and to fire each event the real way."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scrun_py.anchor.handoff import AnchorSpec, BundleInfo, ConfigInfo, ProcessInfo
from scrun_py.anchor.lifecycle import Lifecycle, Occurrence
from scrun_py.anchor.supervised import SupervisedContainer
from scrun_py.anchor.table import Event, Phase
from scrun_py.base import logs
from scrun_py.base.errors import AllocationFailed, ScrunError, StepLaunchFailed
from scrun_py.container import spool
from scrun_py.slurm.options import JobOptions
from tests.unit.fake_slurm import FakeHooks, FakeSlurm

CID = "c1"
TIMEOUT_S = 15.0


class Harness:
    def __init__(self, tmp: Path, environ: dict[str, str] | None = None) -> None:
        self.root = tmp / "root"
        spool.ensure_root(self.root)
        self.dir = Path(spool.make_container_dir(self.root, CID))
        bundle = tmp / "bundle"
        (bundle / "rootfs").mkdir(parents=True)
        self.pid_file = tmp / "c1.pid"
        spec = AnchorSpec(
            container_id=CID, root=str(self.root), orig_bundle=str(bundle),
            pid_file=str(self.pid_file), console_socket="", log_path="", log_format="json",
            debug=False, verbosity=0, slurm_conf=str(tmp / "slurm.conf"), ready_fd=-1,
            created="2026-12-01T00:00:00.000000000Z")
        info = BundleInfo(path=bundle, rootfs=bundle / "rootfs",
                          config=ConfigInfo(ociVersion="1.0.2",
                                            process=ProcessInfo(args=["true"])))
        self.fake = FakeSlurm()
        self.hooks = FakeHooks()
        self.container = SupervisedContainer(spec, info, self.hooks, dict(environ or {}),
                                             quiet_logger())
        self.lc = Lifecycle(self.container, self.fake, JobOptions(alloc=["-p", "debug"]), None)
        self.lc.job_info_delay_s = 0.0  # the time-limit tests want the watch at once
        self.results: list[Any] = []  # what background requests returned or raised

    # ---- observing ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.dir / spool.STATE_FILE).read_text())
        return data

    def took(self, phase: Phase, event: Event) -> bool:
        return any(p is phase and e is event for p, e, _ in self.lc.trace)

    def until(self, cond: Callable[[], bool], what: str = "") -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or cond}; "
                                     f"phase {self.lc.phase}, trace {self.lc.trace}")
            time.sleep(0.001)

    def bg(self, work: Callable[[], Any]) -> threading.Thread:
        """Run a request in a background thread; keep its result or ScrunError."""
        def run() -> None:
            try:
                self.results.append(work())
            except ScrunError as exc:
                self.results.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    # ---- driving -----------------------------------------------------------------------------
    def created(self) -> None:
        assert self.lc.create() is None

    def drive(self, phase: Phase, event: Event | None = None) -> None:
        """Bring the lifecycle into `phase` (the way depends on the event to come)."""
        lc, fake = self.lc, self.fake
        start = len(lc.trace)
        if phase is Phase.CREATING and event is Event.JOB_ENDED:
            self.hooks.hang.add("stage_in")  # the job is watched once allocated
            self.bg(lc.create)
            self.until(lambda: "stage_in" in self.hooks.calls, "stage_in")
        elif phase is Phase.CREATING:
            fake.hold("allocate")
            self.bg(lc.create)
            self.until(lambda: "allocate" in fake.names(), "allocation")
        elif phase is Phase.CREATED:
            self.created()
        elif phase is Phase.STARTING:
            self.created()
            fake.hold("launch_step")
            self.bg(lc.start)
            self.until(lambda: "launch_step" in fake.names(), "launch")
        elif phase is Phase.RUNNING:
            self.created()
            assert fake.job_id == lc.start()
        elif phase is Phase.STOPPING and event is Event.STEP_EXITED:
            self.drive(Phase.RUNNING)
            fake.ignore_signals = True
            self.signal_anchor()
        elif phase is Phase.STOPPING and event is Event.CREATE_FAILED:
            self.drive(Phase.CREATING)
            self.bg(lambda: lc.kill(15))
        elif phase is Phase.STOPPING and event is Event.CLEANED:
            self.created()
            fake.hold("release")
            self.bg(lambda: lc.kill(15))
        elif phase is Phase.STOPPING:
            self.drive(Phase.STARTING)  # the launch is held: nothing ends yet
            self.bg(lambda: lc.kill(15))
        elif phase is Phase.STOPPED:
            self.created()
            lc.kill(15)
            lc.wait_stopped()
        self.until(lambda: lc.phase is phase or any(
            nxt is phase for _, _, nxt in lc.trace[start:]), f"phase {phase}")

    def signal_anchor(self, sig: int = 15) -> None:
        self.lc.post(Occurrence(Event.ANCHOR_SIGNAL, code=128 + sig, sig=sig,
                        reason=f"anchor signal {sig}"))

    def trigger(self, event: Event) -> None:
        """Make `event` happen the way it happens in the anchor."""
        lc, fake = self.lc, self.fake
        if event is Event.CREATED_OK:
            if lc.phase is Phase.CREATING:
                fake.open("allocate")
            else:  # only a race with a stop request gets here: fire it as the race would
                lc.fire(Occurrence(Event.CREATED_OK))
        elif event is Event.CREATE_FAILED:
            if lc.phase is Phase.CREATING:
                fake.fail["allocate"] = AllocationFailed("job allocation failed: no")
                fake.open("allocate")
            # else: the interrupted create reports it by itself
        elif event is Event.START:
            self.bg(lc.start)
        elif event is Event.LAUNCHED:
            fake.open("launch_step")
        elif event is Event.LAUNCH_FAILED:
            fake.fail["launch_step"] = StepLaunchFailed("cannot run srun: no such file")
            fake.open("launch_step")
        elif event is Event.STEP_EXITED:
            assert fake.step is not None
            fake.step.exit(0)
        elif event is Event.JOB_ENDED:
            fake.ended.set()
        elif event is Event.KILL:
            self.bg(lambda: lc.kill(15))
        elif event is Event.KILL_HARMLESS:
            self.bg(lambda: lc.kill(28))  # WINCH
        elif event in (Event.DELETE, Event.DELETE_FORCE):
            self.bg(lambda: lc.delete(event is Event.DELETE_FORCE))
        elif event is Event.ANCHOR_SIGNAL:
            self.signal_anchor()
        elif event is Event.TIME_LIMIT:  # the timer itself: test_time_limit_*
            lc.fire(Occurrence(Event.TIME_LIMIT, code=143, reason="time limit reached"))
        elif event is Event.CLEANED:
            fake.open("release")

    def finish(self) -> int:
        """Let everything end; the lifecycle must reach STOPPED from wherever it is."""
        lc, fake = self.lc, self.fake
        fake.fail.clear()
        fake.ignore_signals = False
        self.hooks.release.set()
        for gate in list(fake.gates):
            fake.open(gate)
        deadline = time.monotonic() + TIMEOUT_S
        while lc.phase is not Phase.STOPPED:
            assert time.monotonic() < deadline, f"stuck in {lc.phase}: {lc.trace}"
            if lc.phase is Phase.CREATED:
                self.bg(lambda: lc.kill(9))
            elif fake.step is not None and fake.step.returncode is None:
                fake.step.exit(0)
            time.sleep(0.005)
        return lc.wait_stopped()


def quiet_logger() -> logs.Logger:
    """Only errors, on stderr (pytest shows them for a failing test)."""
    return logs.Logger(logs.Sinks(stderr_level=logs.LEVELS["error"],
                                  file_level=logs.LEVELS["quiet"],
                                  syslog_level=logs.LEVELS["quiet"], log_path=None,
                                  log_format="json"))


def run(test: Callable[[], None]) -> None:
    """Run a test body in a thread of its own, failing it after 60 s."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            test()
        except BaseException as exc:  # handed to the test's thread
            failure.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        raise AssertionError("the test body did not finish within 60 s")
    if failure:
        raise failure[0]
