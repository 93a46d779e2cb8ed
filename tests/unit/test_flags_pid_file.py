"""--pid-file is locked while it is written, as scrun(1) says."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.container import spool

# A separate process (fcntl locks are per process, and any close of the file in the
# writing process would drop its lock) reads the file and tries a non-blocking read lock.
_TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "rb") as fh:
    sys.stdout.write(fh.read().decode())
    try:
        fcntl.lockf(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        sys.exit(3)
"""


def try_read_lock(path: Path) -> tuple[int, str]:
    res = subprocess.run([sys.executable, "-c", _TRY_LOCK, str(path)], check=False,
                         capture_output=True, text=True, timeout=30)
    return res.returncode, res.stdout


class TestPidFileLock:
    def test_locked_until_in_place(self, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
        """While the new file replaces the old one it is write-locked; afterwards not."""
        path = tmp_path / "pid"
        seen: list[tuple[str, tuple[int, str]]] = []
        real_rename = os.rename

        def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
            seen.append(("before rename", try_read_lock(Path(src))))
            real_rename(src, dst)
            seen.append(("after rename", try_read_lock(Path(dst))))

        monkeypatch.setattr(os, "rename", rename)
        spool.write_pid_file(path, 4242)
        monkeypatch.undo()
        assert [("before rename", (3, "4242")), ("after rename", (3, "4242"))] == seen
        assert (0, "4242") == try_read_lock(path)

    def test_other_files_not_locked(self, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
        """Only the pid file takes the lock (state.json readers never wait)."""
        locks: list[int] = []
        import fcntl

        monkeypatch.setattr(fcntl, "lockf", lambda fd, op: locks.append(op))
        spool.write_atomic(tmp_path / "state.json", b"{}")
        assert [] == locks
        spool.write_pid_file(tmp_path / "pid", 1)
        assert [fcntl.LOCK_EX] == locks
