"""Slurm backend that drives Slurm's own client commands (salloc, srun, scancel, squeue).

Works with every Slurm from 22.05 on; what differs between releases is decided here,
from slurm/releases.py (srun's --container-id exists from 23.02).  The allocation is
salloc_holder.py's: a salloc whose command reports the job environment and then waits
for the anchor to send the exit code.  This module runs the container step and the
helper steps (signals, commands on every node), and scancel; its short commands go
through slurm/runner.py.

The anchor imports this module before it spawns salloc, which is on `create`'s critical
path: subprocess, shlex and parse (all three import re) are imported where they are used,
once the job is being allocated.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence

from scrun_py.base import procs, threads
from scrun_py.base.errors import AllocationFailed, SlurmError, StepLaunchFailed
from scrun_py.base.signames import SIGKILL
from scrun_py.base.threads import Cancel
from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm import releases, runner
from scrun_py.slurm.backend import (
    Allocation,
    AllocRequest,
    JobInfo,
    JobState,
    Step,
    StepExit,
    StepRequest,
)
from scrun_py.slurm.options import JOB_NAME
from scrun_py.slurm.salloc_holder import SallocHolder

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    import subprocess

    from scrun_py.slurm.stderr_relay import StderrRelay

OLDEST = (22, 5)  # the oldest release supported: no --container-id
# Right after start the runtime may not have created the container yet: retry the
# runtime's kill briefly instead of cancelling the step, which Slurm 22.05 cannot clean
# up in that window (the node drains with "Kill task failed").
RUNTIME_SIGNAL_ATTEMPTS = 20
STEP_ID_ATTEMPTS = 20


class SrunStep:
    """The container step: srun, as `Step`; its stderr through `relay` (no terminal)."""

    def __init__(self, proc: subprocess.Popen[bytes], relay: StderrRelay | None) -> None:
        self.proc = proc
        self._relay = relay
        self._lock = threading.Lock()
        self._exit: StepExit | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def wait(self, timeout_s: float | None = None) -> StepExit | None:
        returncode = procs.wait_child(self.proc, timeout_s)
        if returncode is None:
            return None
        with self._lock:
            if self._exit is None:
                reason, retry = None, False
                if self._relay is not None:
                    self._relay.drain()
                    reason, retry = self._relay.launch_failure, self._relay.transient_failure
                    self._relay.close()
                self._exit = StepExit(returncode, reason, retry)
            return self._exit

    def kill(self) -> None:
        self.proc.kill()


class CliSlurm:
    def __init__(self, *, salloc: str = "salloc", srun_path: str = "srun",
                 srun_args: Sequence[str] = (), runtime_kill: str | None = None,
                 version_probe: Callable[[], tuple[int, int] | None] | None = None,
                 memo_dir: str | None = None) -> None:
        """`version_probe`: asks the Slurm release another way first (srun --version when
        it answers None).  `memo_dir`: where srun's answer is remembered per binary
        (slurm/release_memo.py); None asks srun every time."""
        self._salloc = salloc
        self._srun = srun_path
        self._srun_args = list(srun_args)
        self._runtime_kill = runtime_kill
        self._version: tuple[int, int] = OLDEST
        self._version_known: threading.Event | None = None
        self._version_probe = version_probe
        self._memo_dir = memo_dir
        self._jobs = SallocHolder(salloc, self.cancel)
        self._paths: dict[str, str] = {}  # _program's answers

    # ---- the job: salloc_holder.py ------------------------------------------------------
    def allocate(self, req: AllocRequest, cancel: Cancel) -> Allocation:
        # `srun --version` (and the imports the step needs) once salloc runs, while the
        # job is being allocated: not before, where it would delay salloc's own start
        return self._jobs.allocate(req, cancel, spawned=self._start_version_probe)

    def wait_ended(self, alloc: Allocation, cancel: Cancel) -> None:
        self._jobs.wait_ended(alloc, cancel)

    def revoked(self, alloc: Allocation) -> bool:
        return self._jobs.revoked(alloc)

    def release(self, alloc: Allocation, exit_code: int, timeout_s: float) -> None:
        self._jobs.release(alloc, exit_code, timeout_s)

    def attach(self, job_id: int, env: dict[str, str]) -> Allocation:
        self._start_version_probe()
        res = self._run(slurm_argv.build_job_state_argv(job_id))
        state = res.text.strip()
        if res.status != 0 or state not in ("RUNNING", "CONFIGURING"):
            raise AllocationFailed(
                f"SLURM_JOB_ID={job_id} is not a running job ({state or res.status})")
        return Allocation(job_id=job_id, env=dict(env), owned=False)

    def _query(self, argv: list[str]) -> str | None:
        """A read-only query's output; None when it fails or times out (the callers
        treat an unknown answer as no answer)."""
        try:
            res = self._run(argv, timeout_s=15)
        except SlurmError:
            return None
        return res.text if res.status == 0 else None

    def job_info(self, job_id: int) -> JobInfo | None:
        text = self._query(slurm_argv.build_job_info_argv(job_id))
        if text is None:
            return None
        from scrun_py.slurm import parse

        end, uid, gid = parse.parse_job_info(text)
        return JobInfo(end_time=end, uid=uid, gid=gid)

    def job_state(self, job_id: int) -> JobState | None:
        text = self._query(slurm_argv.build_job_reason_argv(job_id))
        if text is None:
            return None
        from scrun_py.slurm import parse

        found = parse.parse_job_reason(text)
        return None if found is None else JobState(state=found[0], reason=found[1])

    def cancel(self, job_id: int, step_id: int | None = None) -> None:
        with contextlib.suppress(SlurmError):
            self._run(slurm_argv.build_scancel_argv(job_id, step_id=step_id), timeout_s=15)

    # ---- the container step -----------------------------------------------------------------
    def launch_step(self, req: StepRequest) -> Step:
        version = self._slurm_version()
        if req.rootfs_problem is not None and not releases.has(version, "root.path"):
            problem = req.rootfs_problem(req.bundle, releases.release_name(version))
            if problem:
                raise StepLaunchFailed(problem)
        argv = slurm_argv.build_srun_argv(
            req, srun_path=self._srun, srun_args=self._srun_args,
            container_id_flag=releases.has(version, "--container-id"))
        import subprocess

        from scrun_py.slurm.stderr_relay import StderrRelay

        kwargs: dict[str, object]
        relay: StderrRelay | None = None
        if req.pty_slave is not None:
            import termios

            slave = req.pty_slave

            def make_controlling_tty() -> None:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

            kwargs = {"stdin": slave, "stdout": slave, "stderr": slave,
                      "preexec_fn": make_controlling_tty}
        else:
            relay = StderrRelay(req.stdio[2])  # srun's own lines left out
            kwargs = {"stdin": req.stdio[0], "stdout": req.stdio[1], "stderr": relay.write_fd}
        try:
            # slurmstepd enters srun's directory for the step: the job's, or one the
            # node can enter (runner.start_dir).  srun is found before that change of
            # directory (an image chooses it): Popen would search PATH's relative
            # entries after it.
            kwargs["cwd"] = self._jobs.job_dir or runner.start_dir()
            proc = subprocess.Popen(  # type: ignore[call-overload]
                argv, executable=procs.resolve_program(argv[0], req.env), env=req.env,
                **kwargs)
        except OSError as exc:
            if relay is not None:
                relay.close()
            raise StepLaunchFailed(f"cannot run {argv[0]}: {exc.strerror}") from exc
        if relay is not None:
            relay.start()
        return SrunStep(proc, relay)

    def step_id(self, job_id: int, alive: Callable[[], bool]) -> int | None:
        for _ in range(STEP_ID_ATTEMPTS):
            try:
                res = self._run(slurm_argv.build_step_list_argv(job_id), timeout_s=15)
            except SlurmError:
                return None
            from scrun_py.slurm import parse

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
        signal still needs Slurm (no usable RunTimeKill, or every attempt failed).  A
        retry skips the containers that took the signal already (each at most once)."""
        from scrun_py.slurm import parse

        per_node = parse.max_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", "1"))
        done: set[str] = set()
        for _attempt in range(RUNTIME_SIGNAL_ATTEMPTS):
            argv = self.signal_argv(job_id, step_id, sig, per_node, done=done)
            if argv is None:
                return False
            res = self._run(argv, env=env)
            if res.status == 0 or not alive():
                return True
            done |= parse.signal_marks(res.text, slurm_argv.SIGNAL_MARK)
            time.sleep(0.25)
        return False

    def scancel_signal(self, job_id: int, step_id: int | None, sig: int) -> None:
        """scancel --signal to the step, or to the job when the step is unknown."""
        with contextlib.suppress(SlurmError):
            self._run(slurm_argv.build_scancel_argv(job_id, signal=sig, step_id=step_id))

    def signal_argv(self, job_id: int, step_id: int | None, sig: int,
                    tasks_per_node: int = 1,
                    done: Collection[str] | None = None) -> list[str] | None:
        """The helper step that runs oci.conf's RunTimeKill with `sig` on the job's nodes
        (marked, skipping `done`, when that is given: signal_shell_command); None when
        there is no usable RunTimeKill (unknown step, unexpandable tokens) or env or srun
        is not found."""
        if not self._runtime_kill or step_id is None:
            return None
        try:
            cmd = slurm_argv.signal_shell_command(self._runtime_kill, job_id=job_id,
                                                  step_id=step_id, signal=sig,
                                                  tasks_per_node=tasks_per_node, done=done)
            return self._helper_step(job_id, cmd, "scrun-signal")
        except (ValueError, SlurmError):
            return None

    def kill_argv(self, job_id: int, step_id: int,
                  tasks_per_node: int = 1) -> list[str] | None:
        """A command that SIGKILLs the container (every task's, up to `tasks_per_node` on
        a node) without the anchor (None if impossible)."""
        return self.signal_argv(job_id, step_id, SIGKILL, tasks_per_node)

    def abandon_script(self, alloc: Allocation, step_id: int) -> str | None:
        """kill_argv under a 30 s `timeout`, every program by its absolute path: the
        holder runs it in the job's working directory (see slurm/argv.py)."""
        import shlex

        from scrun_py.slurm import parse

        per_node = parse.max_tasks_per_node(alloc.env.get("SLURM_TASKS_PER_NODE", "1"))
        argv = self.kill_argv(alloc.job_id, step_id, per_node)
        try:
            timeout = self._program("timeout")
        except SlurmError:
            return None  # no script: the holder then only ends the job
        return None if argv is None else f"{shlex.quote(timeout)} 30 {shlex.join(argv)}\n"

    def command_argv(self, job_id: int, command: str) -> list[str]:
        """SlurmError when env or srun is not found."""
        return self._helper_step(job_id, command, "lua-command")

    def _helper_step(self, job_id: int, command: str, name: str) -> list[str]:
        """build_command_step_argv with env and srun resolved (SlurmError if not found)."""
        return slurm_argv.build_command_step_argv(
            job_id=job_id, command=command, env_path=self._program("env"),
            srun=[self._program(self._srun), *self._srun_args], name=name)

    def _program(self, name: str) -> str:
        """The absolute path of the program `name` (procs.resolve_program: the anchor's
        PATH, absolute entries only), found once; SlurmError when there is none."""
        path = self._paths.get(name)
        if path is None:
            try:
                path = self._paths[name] = procs.resolve_program(name, os.environ)
            except OSError as exc:
                raise SlurmError(f"cannot run {name}: {exc.strerror}") from exc
        return path

    # ---- plumbing ---------------------------------------------------------------------------
    def _start_version_probe(self) -> None:
        """Learn the Slurm version (for --container-id) while the job is allocated, and
        import the step's stderr relay meanwhile (launch_step needs it; `start` waits)."""
        if self._version_known is None:
            known = self._version_known = threading.Event()

            def probe() -> None:
                try:
                    self._version = self._probe_version()  # imports subprocess too
                    import scrun_py.slurm.stderr_relay  # noqa: F401
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
        return client_release(self._srun, self._memo_dir) or OLDEST

    @staticmethod
    def _run(argv: Sequence[str], env: dict[str, str] | None = None,
             timeout_s: float = runner.TIMEOUT_S) -> procs.Result:
        return runner.checked(argv, env=env, timeout_s=timeout_s)


def client_release(srun_path: str = "srun", memo_dir: str | None = None,
                   ) -> tuple[int, int] | None:
    """The release of the client commands (`srun --version`); None when it cannot tell.
    With `memo_dir` (the caller's --root), srun's answer is remembered there per binary
    and srun is asked only when the memo is for another binary (slurm/release_memo.py)."""
    if memo_dir is None:
        return _ask_release(srun_path)
    from scrun_py.slurm import release_memo

    memo = release_memo.memo_path(memo_dir)
    try:
        key = release_memo.binary_key(procs.resolve_program(srun_path, os.environ))
    except OSError:
        key = None
    known = release_memo.recall(memo, key) if key else None
    if known is None:
        known = _ask_release(srun_path)
        if known is not None and key:
            release_memo.remember(memo, key, known)
    return known


def _ask_release(srun_path: str) -> tuple[int, int] | None:
    try:
        res = CliSlurm._run(slurm_argv.build_version_argv(srun_path), timeout_s=15)
    except SlurmError:
        return None
    from scrun_py.slurm import parse

    version = parse.parse_version(res.text)
    return version if res.status == 0 and version else None
