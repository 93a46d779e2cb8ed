"""Slurm backend that drives Slurm's own client commands (salloc, srun, scancel, squeue).

Works with every Slurm from 22.05 on.  The allocation is a salloc whose command
reports the job environment and then waits for the anchor to send the exit code,
so the job is recorded as COMPLETED/FAILED rather than CANCELLED.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import signal
import tempfile
import termios
from collections.abc import Callable, Sequence
from typing import IO

from scrun_py.errors import AllocationFailed, SlurmError, StepLaunchFailed
from scrun_py.slurm.argv import READY_MARKER, build_salloc_argv, build_scancel_argv
from scrun_py.slurm.backend import Allocation

# salloc says so when the job is cancelled or fails while its command still runs
_REVOKED_RE = re.compile(r"[Jj]ob allocation \d+ has been revoked")
_JOB_ID_RE = re.compile(r"(?:job allocation|Pending job allocation|Granted job allocation) (\d+)")
_NOISE = ("salloc: Granted job allocation", "salloc: Pending job allocation",
          "salloc: job ", "salloc: Waiting for resource configuration",
          "salloc: Nodes ", "salloc: Relinquishing job allocation",
          "salloc: Job allocation")
_PREFIX_RE = re.compile(r"^[\w.-]+: (?:error|fatal): ")
_MAX_ERROR_LINES = 3


def _slurm_message(lines: list[str]) -> str:
    """A failed Slurm command's stderr in one line: its last few error lines.

    Slurm often logs the cause before a generic summary, e.g. a required SPANK
    plugin: "<plugin's own message>", "spank: required plugin x.so: init_post_opt()
    failed with rc=-1", "Plugin stack post-option processing failed".  The last
    line alone would hide which plugin failed and why.
    """
    useful = [ln.strip() for ln in lines if ln.strip() and not ln.startswith(_NOISE)]
    errors: list[str] = []
    for ln in reversed(useful):
        if ("error" in ln.lower() or "fatal" in ln.lower()) and ln not in errors:
            errors.insert(0, ln)
            if len(errors) == _MAX_ERROR_LINES:
                break
    if not errors:
        return (useful or [ln.strip() for ln in lines] or ["no output"])[-1]
    # "salloc: error: a", "salloc: error: b" → "salloc: error: a; b"
    prefix = _PREFIX_RE.match(errors[0])
    rest = [ln[prefix.end():] if prefix and ln.startswith(prefix.group()) else ln
            for ln in errors[1:]]
    return "; ".join([errors[0], *rest])


class _StderrFile:
    """Reads what salloc appended to its stderr file since the last call."""

    def __init__(self, fh: IO[bytes], alloc: Allocation) -> None:
        self.fh = fh
        self.alloc = alloc
        self.offset = 0
        self.partial = b""

    def poll(self) -> int:
        """Collect new lines into alloc.holder_stderr; return a job id seen, or 0."""
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
            self.alloc.holder_stderr.append(line)
            if _REVOKED_RE.search(line):
                self.alloc.revoked = True
            m = _JOB_ID_RE.search(line)
            if m and not job_id:
                job_id = int(m.group(1))
        del self.alloc.holder_stderr[:-50]
        return job_id


class CliSlurm:
    def __init__(self, salloc: str = "salloc") -> None:
        self._salloc = salloc
        self._version: tuple[int, int] | None = None

    async def allocate(self, alloc_opts: Sequence[str], env: dict[str, str],
                       on_job_id: Callable[[int], None], timeout_s: float | None) -> Allocation:
        argv = build_salloc_argv(alloc_opts, self._salloc)
        # salloc's stderr goes to an unlinked file, not a pipe: if the anchor dies, a
        # salloc writing to a broken pipe spins at 100% CPU forever (seen on 22.05)
        # kept open for the allocation's lifetime (polled), closed with the process
        err_file = tempfile.TemporaryFile(prefix="scrun-py-salloc-")  # noqa: SIM115
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=err_file, env=env, start_new_session=True)
        except OSError as exc:
            err_file.close()
            raise AllocationFailed(f"cannot run salloc: {exc.strerror}") from exc
        assert proc.stdout is not None
        alloc = Allocation(job_id=0, env={}, owned=True, holder=proc)
        reader = _StderrFile(err_file, alloc)

        async def read_stderr() -> None:
            while True:
                job_id = reader.poll()
                if job_id and not alloc.job_id:
                    alloc.job_id = job_id
                    on_job_id(job_id)
                await asyncio.sleep(0.05)

        stderr_task = asyncio.create_task(read_stderr())
        alloc_task = asyncio.create_task(self._read_env(proc))
        try:
            done = await asyncio.wait_for(asyncio.shield(alloc_task), timeout_s)
        except TimeoutError:
            alloc_task.cancel()
            await self._abort(proc, alloc)
            stderr_task.cancel()
            reader.poll()
            raise AllocationFailed(
                f"job allocation not granted within {timeout_s:g}s"
                + (f" ({_slurm_message(alloc.holder_stderr)})" if alloc.holder_stderr else "")
            ) from None
        except asyncio.CancelledError:
            await self._abort(proc, alloc)
            stderr_task.cancel()
            raise
        stderr_task.cancel()
        if done is None:
            await proc.wait()
            reader.poll()
            raise AllocationFailed(f"job allocation failed: {_slurm_message(alloc.holder_stderr)}")
        alloc.poll_stderr = reader.poll
        alloc.env = done
        job_id = int(done.get("SLURM_JOB_ID", "0") or 0)
        if not job_id:
            await self._abort(proc, alloc)
            raise AllocationFailed("job allocation failed: no SLURM_JOB_ID in the job environment")
        if not alloc.job_id:
            alloc.job_id = job_id
            on_job_id(job_id)
        return alloc

    @staticmethod
    async def _read_env(proc: asyncio.subprocess.Process) -> dict[str, str] | None:
        assert proc.stdout is not None
        buf = b""
        while READY_MARKER not in buf:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                return None
            buf += chunk
        env: dict[str, str] = {}
        for entry in buf.split(READY_MARKER, 1)[0].split(b"\0"):
            name, sep, value = entry.decode(errors="replace").partition("=")
            if sep:
                env[name] = value
        return env

    async def _abort(self, proc: asyncio.subprocess.Process, alloc: Allocation) -> None:
        """Stop a salloc that has not delivered an allocation; cancel its job if any."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if alloc.job_id:
            await self.run(build_scancel_argv(alloc.job_id), timeout_s=10)

    async def release(self, alloc: Allocation, exit_code: int, timeout_s: float) -> None:
        proc = alloc.holder
        if proc is None or not alloc.owned:
            return
        if proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.write(f"{exit_code}\n".encode())
                await proc.stdin.drain()
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            await self.run(build_scancel_argv(alloc.job_id), timeout_s=10)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def launch_step(self, argv: Sequence[str], env: dict[str, str], *,
                          stdio: tuple[int, int, int] | None,
                          pty_slave: int | None) -> asyncio.subprocess.Process:
        kwargs: dict[str, object] = {}
        if pty_slave is not None:
            slave = pty_slave

            def make_controlling_tty() -> None:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

            kwargs = {"stdin": slave, "stdout": slave, "stderr": slave,
                      "preexec_fn": make_controlling_tty}
        elif stdio is not None:
            kwargs = {"stdin": stdio[0], "stdout": stdio[1], "stderr": stdio[2]}
        try:
            return await asyncio.create_subprocess_exec(*argv, env=env, **kwargs)  # type: ignore[arg-type]
        except OSError as exc:
            raise StepLaunchFailed(f"cannot run {argv[0]}: {exc.strerror}") from exc

    async def run(self, argv: Sequence[str], env: dict[str, str] | None = None,
                  timeout_s: float = 30.0) -> tuple[int, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            raise SlurmError(f"cannot run {argv[0]}: {exc.strerror}") from exc
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise SlurmError(f"{argv[0]} timed out after {timeout_s:g}s") from None
        assert proc.returncode is not None
        rc = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return rc, out.decode(errors="replace")

    async def version(self) -> tuple[int, int]:
        if self._version is None:
            rc, out = await self.run(["srun", "--version"], timeout_s=15)
            m = re.search(r"(\d+)\.(\d+)", out)
            if rc != 0 or not m:
                raise SlurmError(f"cannot determine the Slurm version: {out.strip()[:200]}")
            self._version = (int(m.group(1)), int(m.group(2)))
        return self._version
