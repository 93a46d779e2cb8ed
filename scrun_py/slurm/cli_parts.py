"""The pieces of the CLI backend (slurm/cli_backend.py) around its processes: salloc's
stderr file and working directory, the job environment its holder reports, srun as a
`Step`."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from typing import IO

from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm import parse
from scrun_py.slurm.backend import Allocation


class StderrFile:
    """Reads what salloc appended to its stderr file since the last call."""

    def __init__(self, fh: IO[bytes], alloc: Allocation) -> None:
        self.fh = fh
        self.alloc = alloc
        self.offset = 0
        self.partial = b""
        self.revoked = False

    def poll(self) -> int:
        """Collect new lines into alloc.messages; return a job id seen, or 0."""
        try:
            data = os.pread(self.fh.fileno(), 65536, self.offset)
        except (OSError, ValueError):
            return 0
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        job_id = 0
        for raw in lines:
            line = raw.decode(errors="replace")
            self.alloc.messages.append(line)
            if parse.REVOKED_RE.search(line):
                self.revoked = True
            m = parse.JOB_ID_RE.search(line)
            if m and not job_id:
                job_id = int(m.group(1))
        del self.alloc.messages[:-50]
        return job_id


def unlinked_file() -> IO[bytes]:
    """An anonymous file (O_TMPFILE) in $TMPDIR or /tmp, as tempfile.TemporaryFile makes
    it, without importing tempfile (and shutil, random) into every anchor."""
    try:
        fd = os.open(os.environ.get("TMPDIR") or "/tmp",
                     os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError:  # no O_TMPFILE there, or not writable: tempfile finds a place
        import tempfile

        return tempfile.TemporaryFile(prefix="scrun-py-salloc-")
    return open(fd, "w+b")  # kept open for the allocation's lifetime


def salloc_cwd(opts: Sequence[str]) -> str | None:
    """Where salloc starts: the job's WorkDir is salloc's working directory (its --chdir
    moves only salloc's own command), so SCRUN_WORKING_DIR starts salloc there.

    Otherwise the caller's directory, unless the job's user cannot enter it (root's
    home, say): 24.11's slurmstepd then fails every task ("couldn't chdir"), where 22.05
    fell back to /tmp.  scrun-py starts the job in /tmp then, on every release.
    """
    chdir = next((o.partition("=")[2] for o in opts if o.startswith("--chdir=")), "")
    if chdir and os.path.isdir(chdir):
        return chdir
    try:
        usable = os.access(os.getcwd(), os.X_OK)
    except OSError:  # the caller's directory was removed
        usable = False
    return None if usable else "/tmp"


class SrunStep:
    """The container step: srun, as `Step`."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        self.proc.kill()


def close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError, ValueError):
                pipe.close()


def job_env(buf: bytes) -> dict[str, str]:
    """The job environment salloc's command printed (NUL-separated) before READY_MARKER."""
    env: dict[str, str] = {}
    for entry in buf.split(slurm_argv.READY_MARKER, 1)[0].split(b"\0"):
        name, sep, value = entry.decode(errors="replace").partition("=")
        if sep:
            env[name] = value
    return env
