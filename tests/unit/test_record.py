"""The container record written (spool.save_record), read (handle.Container.record) and
refreshed against its anchor."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import ContainerNotFound, InvalidContainerId, ScrunError
from scrun_py.container import spool
from scrun_py.container.handle import Container
from scrun_py.container.record import ContainerRecord
from scrun_py.container.status import Status

# Above the kernel's PID_MAX_LIMIT (4194304): no process can ever have this pid.
IMPOSSIBLE_PID = 4_194_305


@pytest.fixture
def tmp_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    spool.ensure_root(root)
    return root


def _record(**changes: object) -> ContainerRecord:
    record = ContainerRecord(id="c1", bundle="/b/c1", rootfs="/b/c1/rootfs")
    for key, value in changes.items():
        setattr(record, key, value)
    return record


def _live(status: Status, start: str | None = None) -> ContainerRecord:
    """A record whose anchor is this test process."""
    pid = os.getpid()
    return _record(status=status.value, anchor_pid=pid,
                   anchor_start=procs.process_start_time(pid) if start is None else start)


class TestSaveLoad:
    def test_round_trip(self, tmp_root: Path) -> None:
        """Every field survives save and load unchanged."""
        record = ContainerRecord(
            id="c1", bundle="/b/c1", rootfs="/b/c1/rootfs", oci_version="1.0.2",
            annotations={"org.example/a": "1", "b": "two words"}, status="running",
            anchor_pid=1234, anchor_start="5678", created="2024-01-02T03:04:05.000000Z",
            owner="tuser", pid_file="/run/c1.pid", job_id=42, owns_job=False, step_id=0,
            exit_code=3)
        Path(spool.make_container_dir(tmp_root, "c1"))
        spool.save_record(tmp_root, record)
        assert record == Container(str(tmp_root), "c1").record()

    def test_save_overwrites_atomically(self, tmp_root: Path) -> None:
        """A second save replaces the record and leaves no temporary file behind."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        spool.save_record(tmp_root, _record(status="created"))
        spool.save_record(tmp_root, _record(status="running"))
        assert "running" == Container(str(tmp_root), "c1").record().status
        assert [spool.STATE_FILE] == sorted(os.listdir(cdir))

    def test_state_file_is_private(self, tmp_root: Path) -> None:
        """state.json is written with mode 0600."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        spool.save_record(tmp_root, _record())
        assert 0o600 == stat.S_IMODE((cdir / spool.STATE_FILE).stat().st_mode)

    def test_unknown_keys_are_ignored(self, tmp_root: Path) -> None:
        """Keys written by a newer version are ignored; missing optional ones get defaults."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        (cdir / spool.STATE_FILE).write_text(json.dumps(
            {"id": "c1", "bundle": "/b", "rootfs": "/b/r", "from_the_future": [1, 2]}))
        loaded = Container(str(tmp_root), "c1").record()
        assert ("c1", "creating", 0, None) == (loaded.id, loaded.status, loaded.anchor_pid,
                                               loaded.step_id)


class TestMissing:
    def test_no_container_dir(self, tmp_root: Path) -> None:
        """An unknown id reads as runc's `container does not exist`."""
        with pytest.raises(ContainerNotFound) as info:
            Container(str(tmp_root), "nope").record()
        assert "container does not exist" == str(info.value)

    def test_half_created_dir(self, tmp_root: Path) -> None:
        """A container dir without state.json also reads as not found."""
        Path(spool.make_container_dir(tmp_root, "c1"))
        with pytest.raises(ContainerNotFound):
            Container(str(tmp_root), "c1").record()

    def test_missing_root(self, tmp_path: Path) -> None:
        """A --root that does not exist yet holds no containers."""
        with pytest.raises(ContainerNotFound):
            Container(str(tmp_path / "absent"), "c1").record()

    def test_root_is_a_file(self, tmp_path: Path) -> None:
        """A --root that is a regular file is refused, naming it."""
        (tmp_path / "file").write_text("")
        with pytest.raises(ScrunError, match=rf"^root {tmp_path / 'file'} is not a directory$"):
            Container(str(tmp_path / "file"), "c1").record()

    def test_invalid_id(self, tmp_root: Path) -> None:
        """A malformed id is rejected before touching the disk."""
        with pytest.raises(InvalidContainerId):
            Container(str(tmp_root), "../etc").record()


class TestCorrupt:
    @pytest.mark.parametrize("content", [
        b"", b'{"id": "c1", "bund', b"\xff\xfe", b"[]", b'"c1"', b"null",
        b'{"bundle": "/b", "rootfs": "/r"}',
        b'{"id": "c1", "bundle": "/b", "rootfs": "/r", "status": "exploded"}',
    ])
    def test_corrupt_state_file(self, tmp_root: Path, content: bytes) -> None:
        """Truncated, non-object, incomplete or nonsensical state: a ScrunError naming the file."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        (cdir / spool.STATE_FILE).write_bytes(content)
        with pytest.raises(ScrunError) as info:
            Container(str(tmp_root), "c1").record()
        assert ScrunError is type(info.value)
        assert f"corrupt container state file: {cdir / spool.STATE_FILE}" == str(info.value)


class TestEffectiveStatus:
    @pytest.mark.parametrize("status", [Status.CREATING, Status.CREATED, Status.RUNNING])
    def test_live_anchor_keeps_status(self, status: Status) -> None:
        """A record whose anchor pid is alive with the recorded start time reads as its status."""
        assert status is _effective(_live(status))

    def test_live_anchor_without_start_time(self) -> None:
        """Without a recorded start time, a live pid is enough."""
        assert Status.RUNNING is _effective(_live(Status.RUNNING, start=""))

    @pytest.mark.parametrize("status", [Status.CREATING, Status.CREATED, Status.RUNNING])
    def test_dead_anchor_reads_stopped(self, status: Status) -> None:
        """A record whose anchor pid is gone reads as stopped."""
        record = _record(status=status.value, anchor_pid=IMPOSSIBLE_PID, anchor_start="1")
        assert Status.STOPPED is _effective(record)

    def test_reused_pid_reads_stopped(self) -> None:
        """A live pid with a different start time is someone else's process: stopped."""
        own = procs.process_start_time(os.getpid())
        record = _live(Status.RUNNING, start=str(int(own) + 1))
        assert Status.STOPPED is _effective(record)

    @pytest.mark.parametrize("pid", [0, -1])
    def test_no_anchor_pid(self, pid: int) -> None:
        """A record without an anchor pid reads as stopped."""
        assert Status.STOPPED is _effective(_record(status="created", anchor_pid=pid))

    def test_stopped_stays_stopped(self) -> None:
        """A stopped record stays stopped even if its pid is alive."""
        assert Status.STOPPED is _effective(_live(Status.STOPPED))


class TestProcessStartTime:
    def test_own_process(self) -> None:
        """The current process has a decimal start time."""
        assert procs.process_start_time(os.getpid()).isdigit()

    def test_stable(self) -> None:
        """Two reads of the same process agree."""
        pid = os.getpid()
        assert procs.process_start_time(pid) == procs.process_start_time(pid)

    def test_missing_process(self) -> None:
        """A pid with no process gives ''."""
        assert "" == procs.process_start_time(IMPOSSIBLE_PID)


def _effective(record: ContainerRecord) -> Status:
    """The record's status refreshed against its anchor, as a Status."""
    return Status(Container.status(record))
