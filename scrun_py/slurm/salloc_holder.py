"""The salloc that holds a container's job: its command prints the job environment,
then waits for the anchor to send the container's exit code, so the job ends
COMPLETED/FAILED (not CANCELLED) with it; if the anchor dies, the command runs the
abandon script first (argv.holder_script).  Used by the CLI backend (cli_backend.py).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Sequence

from scrun_py.base import procs
from scrun_py.base.errors import AllocationFailed
from scrun_py.base.signames import SIGTERM
from scrun_py.base.threads import Cancel, Cancelled
from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm.backend import Allocation, AllocRequest
from scrun_py.slurm.runner import start_dir

# salloc is spawned before the anchor imports subprocess or re (procs.spawn): parse
# (re) is imported once salloc runs, while the job is being allocated

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import IO

POLL_S = 0.05  # salloc's output, while the job is being allocated
ABORT_GRACE_S = 10.0  # a salloc asked to stop (TERM) before it is killed


class StderrFile:
    """Reads what salloc appended to its stderr file since the last call."""

    def __init__(self, fh: IO[bytes], alloc: Allocation) -> None:
        self.fh = fh
        self.alloc = alloc
        self.offset = 0
        self.partial = b""
        self.revoked = False
        self.pending = 0  # the job salloc said is queued ("Pending job allocation N")

    def poll(self) -> int:
        """Collect new lines into alloc.messages; return a job id seen, or 0."""
        try:
            data = os.pread(self.fh.fileno(), 65536, self.offset)
        except (OSError, ValueError):
            return 0
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        from scrun_py.slurm import parse

        job_id = 0
        for raw in lines:
            line = raw.decode(errors="replace")
            self.alloc.messages.append(line)
            if parse.REVOKED_RE.search(line):
                self.revoked = True
            pending = parse.PENDING_RE.search(line)
            if pending and not self.pending:
                self.pending = int(pending.group(1))
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


class SallocHolder:
    """One container's allocation through salloc; `cancel_job` scancels a job."""

    def __init__(self, salloc: str, cancel_job: Callable[[int], None]) -> None:
        self._salloc = salloc
        self._cancel = cancel_job
        # the job's working directory when it is not the caller's (runner.start_dir: the
        # job's WorkDir is salloc's working directory; its --chdir moves only salloc's
        # own command)
        self.job_dir: str | None = None
        self._holder: procs.Spawned | None = None
        self._stderr: StderrFile | None = None

    def allocate(self, req: AllocRequest, cancel: Cancel,
                 spawned: Callable[[], None] = lambda: None) -> Allocation:
        """The job salloc was granted; `spawned` is called once salloc runs (what the
        anchor does meanwhile is off `create`'s critical path), `req.on_pending` once
        salloc says slurmctld queued the job."""
        env = req.env
        if req.abandon_file is not None:  # the holder script runs it (argv.holder_script)
            env = {**env, slurm_argv.ABANDON_ENV: req.abandon_file}
        self.job_dir = start_dir(req.opts)
        argv = self._argv(req.opts, env)
        # salloc's stderr goes to an unlinked file, not a pipe: if the anchor dies, a
        # salloc writing to a broken pipe spins at 100% CPU forever (seen on 22.05).
        # Kept open for the allocation's lifetime (polled), closed by release.
        err_file = unlinked_file()
        try:
            # salloc is absolute (_argv): spawn runs it, then enters job_dir
            proc = procs.spawn(argv, env, stderr=err_file.fileno(), cwd=self.job_dir)
        except OSError as exc:
            err_file.close()
            raise AllocationFailed(f"cannot run salloc: {exc.strerror}") from exc
        spawned()
        alloc = Allocation(job_id=0, env={}, owned=True)
        reader = StderrFile(err_file, alloc)
        self._holder, self._stderr = proc, reader
        try:
            alloc.env = self._job_env_of(proc, reader, req, cancel)
        except BaseException:
            close_pipes(proc)
            reader.poll()
            err_file.close()
            raise
        job_id = int(alloc.env.get("SLURM_JOB_ID", "0") or 0)
        if not job_id:
            self._abort(proc, alloc)
            close_pipes(proc)
            err_file.close()
            raise AllocationFailed("job allocation failed: no SLURM_JOB_ID in the job environment")
        if not alloc.job_id:
            alloc.job_id = job_id
            req.on_job_id(job_id)
        return alloc

    def _argv(self, opts: Sequence[str], env: dict[str, str]) -> list[str]:
        """salloc's argv, salloc and the env its holder script runs named by the absolute
        paths procs.resolve_program finds now (`env`'s PATH, absolute entries only): the
        script runs in the job's directory, which the image may choose."""
        paths = []
        for name, program in (("salloc", self._salloc), ("env", "env")):
            try:
                paths.append(procs.resolve_program(program, env))
            except OSError as exc:
                raise AllocationFailed(f"cannot run {name}: {exc.strerror}") from exc
        return slurm_argv.build_salloc_argv(opts, paths[1], paths[0])

    def _job_env_of(self, proc: procs.Spawned, reader: StderrFile, req: AllocRequest,
                    cancel: Cancel) -> dict[str, str]:
        """Wait for the job environment salloc's command prints once the job runs; the job
        id (in `reader.alloc`) is noted as soon as salloc names it, a queued job (salloc's
        "Pending job allocation N") told to `req.on_pending` once.  Stops salloc (and
        cancels its job) when cancelled or out of time."""
        from scrun_py.slurm import parse

        assert proc.stdout is not None
        alloc, on_job_id, on_pending = reader.alloc, req.on_job_id, req.on_pending
        out_fd = proc.stdout.fileno()
        timeout_s = req.timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        buf = b""
        told_pending = False
        while slurm_argv.READY_MARKER not in buf:
            job_id = reader.poll()
            if job_id and not alloc.job_id:
                alloc.job_id = job_id
                on_job_id(job_id)
            if reader.pending and not told_pending:  # its job id was noted just above
                told_pending = True
                if on_pending is not None:
                    on_pending(reader.pending)
            if cancel.is_set():
                self._abort(proc, alloc)
                raise Cancelled
            if deadline is not None and time.monotonic() > deadline:
                self._abort(proc, alloc)
                reader.poll()
                raise AllocationFailed(
                    f"job allocation not granted within {timeout_s:g}s"
                    + (f" ({parse.slurm_message(alloc.messages)})" if alloc.messages else ""))
            ready, _, _ = select.select([out_fd], [], [], POLL_S)
            chunk = os.read(out_fd, 65536) if ready else None
            if chunk == b"":  # salloc exited without an allocation
                proc.wait()
                reader.poll()
                raise AllocationFailed(
                    f"job allocation failed: {parse.slurm_message(alloc.messages)}")
            buf += chunk or b""
        return job_env(buf)

    def _abort(self, proc: procs.Spawned, alloc: Allocation) -> None:
        """Stop a salloc that has not delivered an allocation; cancel its job if any."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(SIGTERM)
            if procs.wait_child(proc, ABORT_GRACE_S) is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        if alloc.job_id:
            self._cancel(alloc.job_id)

    def wait_ended(self, alloc: Allocation, cancel: Cancel) -> None:
        holder = self._holder
        if not alloc.owned or holder is None:
            cancel.wait()
            return
        while not cancel.is_set():
            if procs.wait_child(holder, 1.0) is None:
                continue
            self._poll()
            return

    def _poll(self) -> None:
        if self._stderr is not None:
            self._stderr.poll()

    def revoked(self, alloc: Allocation) -> bool:
        if not alloc.owned or self._holder is None or self._stderr is None:
            return False
        self._stderr.poll()
        return self._stderr.revoked or self._holder.poll() is not None

    def release(self, alloc: Allocation, exit_code: int, timeout_s: float) -> None:
        proc = self._holder
        if proc is None or not alloc.owned:
            return
        if proc.poll() is None and proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(f"{exit_code}\n".encode())
                proc.stdin.flush()
        if proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()  # EOF, whatever was written
        if procs.wait_child(proc, timeout_s) is None:
            self._cancel(alloc.job_id)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        close_pipes(proc)
        if self._stderr is not None:
            self._stderr.poll()
            self._stderr.fh.close()  # salloc's stderr file, kept open until its end


def close_pipes(proc: procs.Spawned) -> None:
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
