"""Slurm backend that drives Slurm's own client commands (salloc, srun, scancel, squeue).

Works with every Slurm from 22.05 on; what differs between releases is decided here,
from slurm/releases.py (srun's --container-id exists from 23.02).  The allocation is a
salloc whose command reports the job environment and then waits for the anchor to send
the exit code, so the job is recorded as COMPLETED/FAILED rather than CANCELLED.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shlex
import signal
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO

from scrun_py import procs, threads
from scrun_py.errors import AllocationFailed, SlurmError, StepLaunchFailed
from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm import parse, releases
from scrun_py.slurm.backend import Allocation, JobInfo, Step, StepRequest
from scrun_py.slurm.options import JOB_NAME
from scrun_py.threads import Cancel, Cancelled

OLDEST = (22, 5)  # the oldest release supported: no --container-id
# Right after start the runtime may not have created the container yet: retry the
# runtime's kill briefly instead of cancelling the step, which Slurm 22.05 cannot clean
# up in that window (the node drains with "Kill task failed").
RUNTIME_SIGNAL_ATTEMPTS = 20
STEP_ID_ATTEMPTS = 20
POLL_S = 0.05  # salloc's output, while the job is being allocated
ABORT_GRACE_S = 10.0  # a salloc asked to stop (TERM) before it is killed


class _StderrFile:
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


def _unlinked_file() -> IO[bytes]:
    """An anonymous file (O_TMPFILE) in $TMPDIR or /tmp, as tempfile.TemporaryFile makes
    it, without importing tempfile (and shutil, random) into every anchor."""
    try:
        fd = os.open(os.environ.get("TMPDIR") or "/tmp",
                     os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError:  # no O_TMPFILE there, or not writable: tempfile finds a place
        import tempfile

        return tempfile.TemporaryFile(prefix="scrun-py-salloc-")
    return open(fd, "w+b")  # kept open for the allocation's lifetime


def _salloc_cwd(opts: Sequence[str]) -> str | None:
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


class CliSlurm:
    def __init__(self, *, salloc: str = "salloc", srun_path: str = "srun",
                 srun_args: Sequence[str] = (), runtime_kill: str | None = None,
                 version_probe: Callable[[], tuple[int, int] | None] | None = None) -> None:
        """`version_probe`: asks the Slurm release another way first (srun --version when
        it answers None)."""
        self._salloc = salloc
        self._srun = srun_path
        self._srun_args = list(srun_args)
        self._runtime_kill = runtime_kill
        # the job's working directory when it is not the caller's (see _salloc_cwd)
        self._job_dir: str | None = None
        self._version: tuple[int, int] = OLDEST
        self._version_known: threading.Event | None = None
        self._version_probe = version_probe
        self._holder: subprocess.Popen[bytes] | None = None
        self._stderr: _StderrFile | None = None

    # ---- the job ----------------------------------------------------------------------------
    def allocate(self, opts: Sequence[str], env: dict[str, str],
                 on_job_id: Callable[[int], None], timeout_s: float | None,
                 cancel: Cancel, abandon_file: str | None = None) -> Allocation:
        self._start_version_probe()
        if abandon_file is not None:  # the holder script runs it (argv.HOLDER_SCRIPT)
            env = {**env, slurm_argv.ABANDON_ENV: abandon_file}
        argv, self._job_dir = slurm_argv.build_salloc_argv(opts, self._salloc), _salloc_cwd(opts)
        # salloc's stderr goes to an unlinked file, not a pipe: if the anchor dies, a
        # salloc writing to a broken pipe spins at 100% CPU forever (seen on 22.05).
        # Kept open for the allocation's lifetime (polled), closed by release.
        err_file = _unlinked_file()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=err_file, env=env, start_new_session=True,
                                    cwd=self._job_dir)
        except OSError as exc:
            err_file.close()
            raise AllocationFailed(f"cannot run salloc: {exc.strerror}") from exc
        alloc = Allocation(job_id=0, env={}, owned=True)
        reader = _StderrFile(err_file, alloc)
        self._holder, self._stderr = proc, reader
        try:
            alloc.env = self._job_env_of(proc, alloc, reader, on_job_id, timeout_s, cancel)
        except BaseException:
            _close_pipes(proc)
            reader.poll()
            err_file.close()
            raise
        job_id = int(alloc.env.get("SLURM_JOB_ID", "0") or 0)
        if not job_id:
            self._abort(proc, alloc)
            _close_pipes(proc)
            err_file.close()
            raise AllocationFailed("job allocation failed: no SLURM_JOB_ID in the job environment")
        if not alloc.job_id:
            alloc.job_id = job_id
            on_job_id(job_id)
        return alloc

    def _job_env_of(self, proc: subprocess.Popen[bytes], alloc: Allocation,
                    reader: _StderrFile, on_job_id: Callable[[int], None],
                    timeout_s: float | None, cancel: Cancel) -> dict[str, str]:
        """Wait for the job environment salloc's command prints once the job runs; the job
        id is noted as soon as salloc names it.  Stops salloc (and cancels its job) when
        cancelled or out of time."""
        assert proc.stdout is not None
        out_fd = proc.stdout.fileno()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        buf = b""
        while slurm_argv.READY_MARKER not in buf:
            job_id = reader.poll()
            if job_id and not alloc.job_id:
                alloc.job_id = job_id
                on_job_id(job_id)
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
        return _job_env(buf)

    def _abort(self, proc: subprocess.Popen[bytes], alloc: Allocation) -> None:
        """Stop a salloc that has not delivered an allocation; cancel its job if any."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(ABORT_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        if alloc.job_id:
            self.cancel(alloc.job_id)

    def attach(self, job_id: int, env: dict[str, str]) -> Allocation:
        self._start_version_probe()
        res = self._run(slurm_argv.build_job_state_argv(job_id))
        state = res.text.strip()
        if res.status != 0 or state not in ("RUNNING", "CONFIGURING"):
            raise AllocationFailed(
                f"SLURM_JOB_ID={job_id} is not a running job ({state or res.status})")
        return Allocation(job_id=job_id, env=dict(env), owned=False)

    def wait_ended(self, alloc: Allocation, cancel: Cancel) -> None:
        holder = self._holder
        if not alloc.owned or holder is None:
            cancel.wait()
            return
        while not cancel.is_set():
            try:
                holder.wait(1.0)
            except subprocess.TimeoutExpired:
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

    def job_info(self, job_id: int) -> JobInfo | None:
        try:
            res = self._run(slurm_argv.build_job_info_argv(job_id), timeout_s=15)
        except SlurmError:
            return None
        if res.status != 0:
            return None
        end, uid, gid = parse.parse_job_info(res.text)
        return JobInfo(end_time=end, uid=uid, gid=gid)

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
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.cancel(alloc.job_id)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        _close_pipes(proc)
        if self._stderr is not None:
            self._stderr.poll()
            self._stderr.fh.close()  # salloc's stderr file, kept open until its end

    def cancel(self, job_id: int, step_id: int | None = None) -> None:
        with contextlib.suppress(SlurmError):
            self._run(slurm_argv.build_scancel_argv(job_id, step_id=step_id), timeout_s=15)

    # ---- the container step -----------------------------------------------------------------
    def launch_step(self, req: StepRequest) -> Step:
        version = self._slurm_version()
        if not releases.has(version, "root.path"):
            from scrun_py.oci.bundle import bundle_rootfs_problem

            problem = bundle_rootfs_problem(req.bundle, releases.release_name(version))
            if problem:
                raise StepLaunchFailed(problem)
        argv = slurm_argv.build_srun_argv(
            job_id=req.job_id, container_id=req.container_id, bundle=req.bundle,
            args=req.args, step_opts=req.step_opts, srun_path=self._srun,
            srun_args=self._srun_args, pty=req.pty,
            container_id_flag=releases.has(version, "--container-id"))
        kwargs: dict[str, object]
        if req.pty_slave is not None:
            slave = req.pty_slave

            def make_controlling_tty() -> None:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

            kwargs = {"stdin": slave, "stdout": slave, "stderr": slave,
                      "preexec_fn": make_controlling_tty}
        else:
            kwargs = {"stdin": req.stdio[0], "stdout": req.stdio[1], "stderr": req.stdio[2]}
        try:
            # slurmstepd enters srun's directory for the step: the job's, not one the
            # user cannot enter
            kwargs["cwd"] = self._job_dir or _salloc_cwd([])
            return SrunStep(subprocess.Popen(argv, env=req.env, **kwargs))  # type: ignore[call-overload]
        except OSError as exc:
            raise StepLaunchFailed(f"cannot run {argv[0]}: {exc.strerror}") from exc

    def step_id(self, job_id: int, alive: Callable[[], bool]) -> int | None:
        for _ in range(STEP_ID_ATTEMPTS):
            try:
                res = self._run(slurm_argv.build_step_list_argv(job_id), timeout_s=15)
            except SlurmError:
                return None
            ids = parse.parse_step_ids(res.text, JOB_NAME)
            if res.status == 0 and ids:
                return max(ids)
            if not alive():
                return None
            time.sleep(0.1)
        return None

    def signal(self, job_id: int, step_id: int | None, sig: int, env: dict[str, str],
               alive: Callable[[], bool]) -> None:
        if not self.signal_through_runtime(job_id, step_id, sig, env, alive):
            self.scancel_signal(job_id, step_id, sig)

    def signal_through_runtime(self, job_id: int, step_id: int | None, sig: int,
                               env: dict[str, str], alive: Callable[[], bool]) -> bool:
        """RunTimeKill in a helper step, retried while the step lives; False when the
        signal still needs Slurm (no usable RunTimeKill, or every attempt failed)."""
        argv = self.signal_argv(job_id, step_id, sig, parse.max_tasks_per_node(
            env.get("SLURM_TASKS_PER_NODE", "1")))
        if argv is not None:
            for _attempt in range(RUNTIME_SIGNAL_ATTEMPTS):
                res = self._run(argv, env=env)
                if res.status == 0 or not alive():
                    return True
                time.sleep(0.25)
        return False

    def scancel_signal(self, job_id: int, step_id: int | None, sig: int) -> None:
        """scancel --signal to the step, or to the job when the step is unknown."""
        with contextlib.suppress(SlurmError):
            self._run(slurm_argv.build_scancel_argv(job_id, signal=sig, step_id=step_id))

    def signal_argv(self, job_id: int, step_id: int | None, sig: int,
                    tasks_per_node: int = 1) -> list[str] | None:
        """The helper step that runs oci.conf's RunTimeKill with `sig` on the job's nodes;
        None when there is no usable RunTimeKill (unknown step, unexpandable tokens)."""
        if not self._runtime_kill or step_id is None:
            return None
        try:
            cmd = slurm_argv.signal_shell_command(self._runtime_kill, job_id=job_id,
                                                  step_id=step_id, signal=sig,
                                                  tasks_per_node=tasks_per_node)
        except ValueError:
            return None
        return slurm_argv.build_command_step_argv(
            job_id=job_id, command=cmd, srun_path=self._srun, srun_args=self._srun_args,
            name="scrun-signal")

    def kill_argv(self, job_id: int, step_id: int,
                  tasks_per_node: int = 1) -> list[str] | None:
        """A command that SIGKILLs the container (every task's, up to `tasks_per_node` on
        a node) without the anchor (None if impossible)."""
        return self.signal_argv(job_id, step_id, int(signal.SIGKILL), tasks_per_node)

    def abandon_script(self, alloc: Allocation, step_id: int) -> str | None:
        per_node = parse.max_tasks_per_node(alloc.env.get("SLURM_TASKS_PER_NODE", "1"))
        argv = self.kill_argv(alloc.job_id, step_id, per_node)
        return None if argv is None else f"timeout 30 {shlex.join(argv)}\n"

    def command_argv(self, job_id: int, command: str) -> list[str]:
        return slurm_argv.build_command_step_argv(
            job_id=job_id, command=command, srun_path=self._srun, srun_args=self._srun_args)

    # ---- plumbing ---------------------------------------------------------------------------
    def _start_version_probe(self) -> None:
        """Learn the Slurm version (for --container-id) while the job is allocated."""
        if self._version_known is None:
            known = self._version_known = threading.Event()

            def probe() -> None:
                try:
                    self._version = self._probe_version()
                finally:
                    known.set()

            threads.spawn(probe, "scrun-version")

    def _slurm_version(self) -> tuple[int, int]:
        self._start_version_probe()
        assert self._version_known is not None
        self._version_known.wait()
        return self._version

    def _probe_version(self) -> tuple[int, int]:
        known = self._version_probe() if self._version_probe is not None else None
        if known is not None:
            return known
        try:
            res = self._run(slurm_argv.build_version_argv(self._srun), timeout_s=15)
        except SlurmError:
            return OLDEST
        version = parse.parse_version(res.text)
        return version if res.status == 0 and version else OLDEST

    @staticmethod
    def _run(argv: Sequence[str], env: dict[str, str] | None = None,
             timeout_s: float = 30.0) -> procs.Result:
        res = procs.run(argv, env=env, timeout_s=timeout_s)
        if res.error:
            raise SlurmError(f"cannot run {argv[0]}: {res.error}")
        if res.timed_out:
            raise SlurmError(f"{argv[0]} timed out after {timeout_s:g}s")
        return res


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError, ValueError):
                pipe.close()


def _job_env(buf: bytes) -> dict[str, str]:
    """The job environment salloc's command printed (NUL-separated) before READY_MARKER."""
    env: dict[str, str] = {}
    for entry in buf.split(slurm_argv.READY_MARKER, 1)[0].split(b"\0"):
        name, sep, value = entry.decode(errors="replace").partition("=")
        if sep:
            env[name] = value
    return env
