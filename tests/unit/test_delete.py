"""Unit tests for scrun_py.commands.delete: who decides whether a container may go.

Without --force the anchor decides from its lifecycle phase (a running container is
refused with runc's words, a created one is killed and deleted); the client only falls
back on its own when the anchor cannot answer.  The anchor here is this test process
(alive, with its real start time); its answers are stubbed at `Container.request`.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import AnchorUnreachable, ContainerStillRunning
from scrun_py.commands import delete
from scrun_py.container import spool
from scrun_py.container.handle import Container
from tests.unit.cli_run import run, stored

# Above the kernel's PID_MAX_LIMIT (4194304): no process can ever have this pid.
IMPOSSIBLE_PID = 4_194_305
RUNC_REFUSAL = "cannot delete container c1 that is not stopped: running"





def _live(root: Path, status: str) -> Path:
    """A record whose anchor is this (live) process."""
    pid = os.getpid()
    return stored(root, status, pid, anchor_start=procs.process_start_time(pid))


class TestDelete:
    def test_running_refused_by_the_anchor(self, tmp_root: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
        """delete of a running container asks the anchor (force=False) and shows its
        refusal, runc's exact message, on one line; nothing is removed."""
        cdir = _live(tmp_root, "running")
        with mock.patch.object(Container, "request",
                               side_effect=ContainerStillRunning("c1")) as request:
            assert 1 == run(["--root", str(tmp_root), "delete", "c1"])
        assert [mock.call("delete", None, force=False)] == (
            request.call_args_list)
        err = capsys.readouterr().err
        assert RUNC_REFUSAL in err
        assert 1 == len(err.splitlines())
        assert (cdir / spool.STATE_FILE).exists()

    @pytest.mark.parametrize("force", [False, True])
    def test_created_is_deleted(self, tmp_root: Path, force: bool) -> None:
        """delete of a created container, with or without --force, has the anchor kill it
        and removes every trace."""
        cdir = _live(tmp_root, "created")
        argv = ["--root", str(tmp_root), "delete", *(["--force"] if force else []), "c1"]
        with mock.patch.object(Container, "request", return_value={}) as request, \
                mock.patch.object(delete, "_wait_anchor_exit"):
            assert 0 == run(argv)
        assert force == request.call_args.kwargs["force"]
        assert cdir.exists() is False

    def test_running_force(self, tmp_root: Path) -> None:
        """delete --force of a running container goes through the anchor and succeeds."""
        cdir = _live(tmp_root, "running")
        with mock.patch.object(Container, "request", return_value={}) as request, \
                mock.patch.object(delete, "_wait_anchor_exit"):
            assert 0 == run(["--root", str(tmp_root), "delete", "--force", "c1"])
        assert request.call_args.kwargs["force"] is True
        assert cdir.exists() is False

    def test_running_anchor_alive_but_silent(self, tmp_root: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """An anchor that is alive yet cannot be reached is not deleted under a running
        container without --force: runc's refusal, everything kept."""
        cdir = _live(tmp_root, "running")
        monkeypatch.setattr(delete, "ANCHOR_EXIT_WAIT_S", 0.0)
        with mock.patch.object(Container, "request", side_effect=AnchorUnreachable("gone")):
            assert 1 == run(["--root", str(tmp_root), "delete", "c1"])
        assert RUNC_REFUSAL in capsys.readouterr().err
        assert (cdir / spool.STATE_FILE).exists()

    def test_dead_anchor_job_is_cancelled(self, tmp_root: Path, scancel_args: Path) -> None:
        """A running record whose anchor died: delete runs `scancel JOB` itself (here a
        stand-in on PATH that records its argv) and removes the container."""
        seen = scancel_args
        cdir = stored(tmp_root, "running", IMPOSSIBLE_PID, job_id=42, owns_job=True)
        assert 0 == run(["--root", str(tmp_root), "delete", "c1"])
        assert "42\n" == seen.read_text()
        assert cdir.exists() is False

    @pytest.mark.parametrize("plant", ["open-dir", "open-file", "foreign-dir"])
    def test_planted_record_not_acted_on(self, tmp_root: Path, tmp_path: Path,
                                         scancel_args: Path,
                                         capsys: pytest.CaptureFixture[str],
                                         plant: str) -> None:
        """A record another user could have written (its directory or state.json
        writable by others, or a directory that is not the caller's) is not trusted:
        delete refuses with one line, runs no scancel and leaves the recorded pid file."""
        seen = scancel_args
        pid_file = tmp_path / "victim.pid"
        pid_file.write_text(str(IMPOSSIBLE_PID))
        cdir = stored(tmp_root, "running", IMPOSSIBLE_PID, job_id=42, owns_job=True,
                      pid_file=str(pid_file))
        if plant == "open-dir":
            cdir.chmod(0o777)
        elif plant == "open-file":
            (cdir / spool.STATE_FILE).chmod(0o666)
        elif os.geteuid() == 0:
            os.chown(cdir, 65534, 65534)
        else:
            pytest.skip("giving a directory to another uid needs root")
        assert 1 == run(["--root", str(tmp_root), "delete", "--force", "c1"])
        err = capsys.readouterr().err
        assert 1 == len(err.splitlines()), err
        assert "permission denied: container " in err
        assert not seen.exists()
        assert pid_file.exists()
        assert (cdir / spool.STATE_FILE).exists()

    def test_dead_anchor_scancel_missing(self, tmp_root: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
        """No scancel to run is no failure of delete: the container still goes."""
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        cdir = stored(tmp_root, "running", IMPOSSIBLE_PID, job_id=42, owns_job=True)
        assert 0 == run(["--root", str(tmp_root), "delete", "c1"])
        assert cdir.exists() is False
