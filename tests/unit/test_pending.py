"""A job allocation that is not granted at once: the anchor's info record in --log (job id,
Slurm's reason), the line on create's stderr when it is a terminal (a pty here), and
state's annotations while the job waits, gone once it runs.  The lifecycle runs on the
fake Slurm backend; the CLI backend's part (salloc's pending line, squeue's reason) runs
against stand-in commands."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrun_py.anchor.supervised import JOB_REASON_ANNOTATION, JOB_STATE_ANNOTATION
from scrun_py.anchor.table import Phase
from scrun_py.base import logs
from scrun_py.base.threads import Cancel
from scrun_py.container import spool
from scrun_py.container.handle import Container as Handle
from scrun_py.slurm.backend import AllocRequest, JobState
from scrun_py.slurm.cli_backend import CliSlurm
from scrun_py.slurm.pyslurm_backend import PyslurmSlurm
from tests.unit.anchor_harness import CID, Harness, run

PENDING_NOTES = {JOB_STATE_ANNOTATION: "PENDING", JOB_REASON_ANNOTATION: "Resources"}
LINE = b"scrun-py: pending job allocation 77 (reason: Resources)\r\n"  # the pty's ONLCR


@pytest.fixture
def pty() -> Iterator[tuple[int, int]]:
    """A terminal: (master, slave); the anchor writes to the slave as create's stderr."""
    master, slave = os.openpty()
    yield master, slave
    for fd in (master, slave):
        try:
            os.close(fd)
        except OSError:
            pass


def read_terminal(master: int, wait_s: float = 0.2) -> bytes:
    """What was written to the terminal so far (until `wait_s` passes without more)."""
    out = b""
    while select.select([master], [], [], wait_s)[0]:
        chunk = os.read(master, 4096)
        if not chunk:
            break
        out += chunk
    return out


def wait_terminal(master: int, timeout_s: float = 10.0) -> bytes:
    """The terminal's output up to a whole line (what there is after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    out = b""
    while not out.endswith(b"\n") and time.monotonic() < deadline:
        out += read_terminal(master, 0.05)
    return out


def pending_harness(tmp: Path, stderr_fd: int, reason: str | None = "Resources") -> Harness:
    """A lifecycle whose allocation Slurm queues (held until the test opens the gate), with
    an info-level --log file and `stderr_fd` as create's stderr."""
    h = Harness(tmp)
    h.fake.pending_reason = reason
    h.fake.hold("allocate")
    h.container.stderr_fd = stderr_fd
    h.container.log = logs.Logger(logs.Sinks(
        stderr_level=logs.LEVELS["error"], file_level=logs.LEVELS["info"],
        syslog_level=logs.LEVELS["quiet"], log_path=str(tmp / "log.json"), log_format="json"))
    return h


def records(tmp: Path, msg: str) -> list[dict[str, Any]]:
    path = tmp / "log.json"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["msg"] == msg]


def state_annotations(h: Harness) -> dict[str, str]:
    """The annotations `state` prints (the OCI state document read from the record);
    none before the anchor's first save."""
    if not (h.dir / spool.STATE_FILE).exists():
        return {}
    doc = json.loads(Handle(str(h.root), CID).state_line())
    assert "creating" == doc["status"] or h.lc.phase is not Phase.CREATING
    notes: dict[str, str] = doc["annotations"]
    return notes


class TestPendingAllocation:
    def test_pending_then_granted(self, tmp_path: Path, pty: tuple[int, int]) -> None:
        """Slurm queues the job: one info record names the job and the reason, the
        terminal hears it once, `state` shows PENDING and the reason; once the job runs
        the annotations are gone and the container is created as usual."""
        master, slave = pty

        def body() -> None:
            h = pending_harness(tmp_path, slave)
            h.bg(h.lc.create)
            h.until(lambda: PENDING_NOTES == state_annotations(h), "pending annotations")
            assert "creating" == json.loads(Handle(str(h.root), CID).state_line())["status"]
            [rec] = records(tmp_path, "job allocation pending")
            assert ("info", 77, "Resources", "PENDING") == (
                rec["level"], rec["job_id"], rec["reason"], rec["job_state"])
            assert LINE == wait_terminal(master)
            h.fake.open("allocate")
            h.until(lambda: "created" == h.state()["status"], "created")
            assert {} == state_annotations(h)
            assert (77, {}) == (h.state()["job_id"], h.state()["annotations"])
            assert b"" == read_terminal(master)  # said once
            assert 1 == len(records(tmp_path, "job allocation pending"))
            h.finish()

        run(body)

    def test_no_line_without_a_terminal(self, tmp_path: Path) -> None:
        """create's stderr is a pipe (an engine reads it): nothing is written there; the
        record and the annotations are the same."""
        r, w = os.pipe()
        try:
            def body() -> None:
                h = pending_harness(tmp_path, w)
                h.bg(h.lc.create)
                h.until(lambda: PENDING_NOTES == state_annotations(h), "pending annotations")
                assert 1 == len(records(tmp_path, "job allocation pending"))
                h.fake.open("allocate")
                h.until(lambda: h.lc.phase is Phase.CREATED, "created")
                h.finish()

            run(body)
            os.set_blocking(r, False)
            with pytest.raises(BlockingIOError):
                os.read(r, 4096)
        finally:
            os.close(r)
            os.close(w)

    def test_granted_at_once(self, tmp_path: Path, pty: tuple[int, int]) -> None:
        """A job granted at once: no squeue, no record, no annotation, nothing on the
        terminal."""
        master, slave = pty

        def body() -> None:
            h = pending_harness(tmp_path, slave, reason=None)
            h.fake.open("allocate")
            h.created()
            assert "job_state" not in h.fake.names()
            assert [] == records(tmp_path, "job allocation pending")
            assert {} == state_annotations(h)
            assert b"" == read_terminal(master)
            h.finish()

        run(body)

    def test_reason_kept_current(self, tmp_path: Path, pty: tuple[int, int]) -> None:
        """The reason changes while the job waits (Priority, then Resources): state's
        annotation follows and --log says so; the terminal line is not repeated."""
        master, slave = pty

        def body() -> None:
            h = pending_harness(tmp_path, slave, reason="Priority")
            h.lc.job.pending_refresh_s = 0.01
            h.bg(h.lc.create)
            h.until(lambda: "Priority" == state_annotations(h).get(JOB_REASON_ANNOTATION),
                    "Priority")
            h.fake.pending_reason = "Resources"
            h.until(lambda: PENDING_NOTES == state_annotations(h), "Resources")
            h.until(lambda: 1 == len(records(tmp_path, "job allocation still pending")),
                    "the record of the new reason")
            [rec] = records(tmp_path, "job allocation still pending")
            assert (77, "Resources") == (rec["job_id"], rec["reason"])
            assert b"scrun-py: pending job allocation 77 (reason: Priority)\r\n" == \
                wait_terminal(master)
            h.fake.open("allocate")
            h.until(lambda: h.lc.phase is Phase.CREATED, "created")
            assert {} == state_annotations(h)
            assert b"" == read_terminal(master)
            h.finish()

        run(body)

    def test_waits_for_a_reason(self, tmp_path: Path, pty: tuple[int, int]) -> None:
        """Just queued, the job shows no reason yet ("None"): it is asked again, and the
        first real reason is the one reported."""
        master, slave = pty

        def body() -> None:
            h = pending_harness(tmp_path, slave, reason="")
            h.lc.job.reason_retry_s = 0.05
            h.bg(h.lc.create)
            h.until(lambda: "job_state" in h.fake.names(), "the first squeue")
            h.fake.pending_reason = "Resources"
            h.until(lambda: PENDING_NOTES == state_annotations(h), "pending annotations")
            [rec] = records(tmp_path, "job allocation pending")
            assert "Resources" == rec["reason"]
            assert LINE == wait_terminal(master)
            h.fake.open("allocate")
            h.until(lambda: h.lc.phase is Phase.CREATED, "created")
            h.finish()

        run(body)

    def test_slurm_does_not_answer(self, tmp_path: Path, pty: tuple[int, int]) -> None:
        """No reason to be had (squeue fails): the job is still shown PENDING, with no
        reason annotation, and the terminal line says no reason."""
        master, slave = pty

        def body() -> None:
            h = pending_harness(tmp_path, slave)
            h.fake.fail["job_state"] = RuntimeError("not used: job_state answers None")
            h.bg(h.lc.create)
            h.until(lambda: {JOB_STATE_ANNOTATION: "PENDING"} == state_annotations(h),
                    "the state annotation")
            [rec] = records(tmp_path, "job allocation pending")
            assert (77, None) == (rec["job_id"], rec["reason"])
            assert b"scrun-py: pending job allocation 77\r\n" == wait_terminal(master)
            h.fake.open("allocate")
            h.until(lambda: h.lc.phase is Phase.CREATED, "created")
            assert {} == state_annotations(h)
            h.finish()

        run(body)

    def test_withdrawn_while_pending(self, tmp_path: Path) -> None:
        """A kill while the job waits withdraws the request: the create fails, the
        container's directory is gone and the pending watch asks Slurm no more."""
        def body() -> None:
            h = pending_harness(tmp_path, -1)
            h.lc.job.pending_refresh_s = 0.01
            h.bg(h.lc.create)
            h.until(lambda: PENDING_NOTES == state_annotations(h), "pending annotations")
            h.lc.kill(15)
            assert 1 == h.lc.wait_stopped()  # an aborted create
            assert not h.dir.exists()
            asked = h.fake.names().count("job_state")
            time.sleep(0.1)
            assert asked == h.fake.names().count("job_state")

        run(body)

    def test_config_annotations_come_back(self, tmp_path: Path) -> None:
        """config.json's own values for the two keys are what `state` shows again once the
        job runs; its other annotations are never touched."""
        def body() -> None:
            h = Harness(tmp_path)
            own = {JOB_STATE_ANNOTATION: "mine", "org.example": "x"}
            bundle = h.container.bundle
            h.container.bundle = bundle._replace(config=bundle.config._replace(annotations=own))
            h.container.record.annotations = dict(own)
            h.container.note_job_wait("PENDING", "Priority")
            assert {**own, **PENDING_NOTES, JOB_REASON_ANNOTATION: "Priority"} == \
                h.state()["annotations"]
            h.container.clear_job_wait()
            assert own == h.container.record.annotations

        run(body)


SALLOC = """#!/bin/sh
echo "salloc $*" >> "$LOG"
if [ -n "$PENDING" ]; then
  echo "salloc: Pending job allocation 55" >&2
  echo "salloc: job 55 queued and waiting for resources" >&2
  while [ ! -e "$GRANT" ]; do sleep 0.02; done
  echo "salloc: job 55 has been allocated resources" >&2
fi
echo "salloc: Granted job allocation 55" >&2
while [ "$1" != "--" ]; do shift; done; shift
SLURM_JOB_ID=55 exec "$@"
"""
SQUEUE = """#!/bin/sh
echo "squeue $*" >> "$LOG"
[ -n "$SQUEUE_FAIL" ] && { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
echo "$JOB_REASON"
"""


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for name, text in (("salloc", SALLOC), ("squeue", SQUEUE), ("srun", "#!/bin/sh\n"),
                       ("scancel", "#!/bin/sh\n")):
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(tmp_path / "log"))
    monkeypatch.setenv("GRANT", str(tmp_path / "grant"))
    monkeypatch.setenv("JOB_REASON", "PENDING|Resources")
    for var in ("PENDING", "SQUEUE_FAIL"):
        monkeypatch.delenv(var, raising=False)
    return d


class TestCliBackend:
    def allocate(self, bin_dir: Path, pyslurm: bool = False) -> tuple[list[int], list[int]]:
        """Allocate through the stand-in salloc (the CLI backend, or the pyslurm backend
        without pyslurm); the job ids heard by on_job_id and on_pending.  A queued job is
        granted once on_pending has heard of it."""
        cli = CliSlurm(salloc=str(bin_dir / "salloc"), srun_path=str(bin_dir / "srun"))
        slurm = PyslurmSlurm(cli, lambda: None, lambda msg, **fields: None) if pyslurm else cli
        heard: list[int] = []
        pending: list[int] = []

        def grant() -> None:
            deadline = time.monotonic() + 10
            while not pending and time.monotonic() < deadline:
                time.sleep(0.01)
            (bin_dir.parent / "grant").touch()

        threading.Thread(target=grant, daemon=True).start()
        alloc = slurm.allocate(AllocRequest([], dict(os.environ), heard.append, 20,
                                            on_pending=pending.append), Cancel())
        assert 55 == alloc.job_id
        slurm.release(alloc, 0, 10)
        return heard, pending

    def test_pending_line_is_heard_once(self, bin_dir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
        """salloc's "Pending job allocation 55" reaches on_pending once, after on_job_id,
        while salloc still waits for the job to run."""
        monkeypatch.setenv("PENDING", "1")
        assert ([55], [55]) == self.allocate(bin_dir)

    def test_granted_at_once(self, bin_dir: Path) -> None:
        """A job granted at once: on_pending never hears of it."""
        assert ([55], []) == self.allocate(bin_dir)

    def test_job_state(self, bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """One squeue with `%T|%r`; a job squeue no longer knows (or no answer) is None."""
        slurm = CliSlurm(srun_path=str(bin_dir / "srun"))
        assert JobState("PENDING", "Resources") == slurm.job_state(55)
        log = bin_dir.parent / "log"
        assert "squeue --noheader --jobs=55 --format=%T|%r" == log.read_text().splitlines()[-1]
        monkeypatch.setenv("SQUEUE_FAIL", "1")
        assert slurm.job_state(55) is None

    def test_pyslurm_backend_uses_the_commands(self, bin_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
        """The pyslurm backend hears salloc's pending line through its CliSlurm and asks
        squeue for the reason (pyslurm's job view has none), pyslurm loaded or not."""
        monkeypatch.setenv("PENDING", "1")
        assert ([55], [55]) == self.allocate(bin_dir, pyslurm=True)
        cli = CliSlurm(srun_path=str(bin_dir / "srun"))
        slurm = PyslurmSlurm(cli, lambda: None, lambda msg, **fields: None)
        assert JobState("PENDING", "Resources") == slurm.job_state(55)
