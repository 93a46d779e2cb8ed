"""Container lifecycle in the anchor: allocate → stage_in → (start) launch → wait → stage_out
→ end job → stopped.

One asyncio task runs the lifecycle; the control server and the signal consumer
only post requests to it (`request_start`, `request_stop`, `signal`).  Blocking
Lua hooks run in a worker thread so the socket keeps answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import pwd
import shlex
import signal as signal_mod
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from scrun_py import audit, spool, store
from scrun_py.anchor.spec import AnchorSpec, BundleInfo, RuntimeSettings
from scrun_py.anchor.stderr_relay import StderrRelay
from scrun_py.errors import (
    AllocationFailed,
    ContainerNotRunning,
    ContainerStillRunning,
    ScrunError,
    SlurmError,
)
from scrun_py.hooks.lua import HookContext, Hooks, NoHooks
from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm.backend import Allocation, SlurmBackend
from scrun_py.slurm.options import JobOptions
from scrun_py.status import Status

# Signals whose default action ends a process: a created (not yet started)
# container receiving one is gone, like runc's init waiting on its exec fifo.
_FATAL_BY_DEFAULT = {int(s) for s in (
    signal_mod.SIGHUP, signal_mod.SIGINT, signal_mod.SIGQUIT, signal_mod.SIGILL,
    signal_mod.SIGABRT, signal_mod.SIGFPE, signal_mod.SIGKILL, signal_mod.SIGSEGV,
    signal_mod.SIGPIPE, signal_mod.SIGALRM, signal_mod.SIGTERM, signal_mod.SIGUSR1,
    signal_mod.SIGUSR2, signal_mod.SIGBUS, signal_mod.SIGTRAP, signal_mod.SIGXCPU,
    signal_mod.SIGXFSZ, signal_mod.SIGVTALRM, signal_mod.SIGPROF, signal_mod.SIGSYS)}
RELEASE_TIMEOUT_S = 60.0
KILL_GRACE_S = 15.0
RUNTIME_SIGNAL_ATTEMPTS = 20
# stop containers this long before the job's time limit (Slurm sends TERM at the limit)
TIME_LIMIT_MARGIN_S = 15.0
TIME_LIMIT_GRACE_S = 5.0
STDERR_DRAIN_S = 5.0  # after srun exits: what the container wrote last still arrives


def wait_status_to_exit_code(rc: int) -> int:
    """asyncio's returncode (negative for signals) → shell-style 0..255."""
    return 128 - rc if rc < 0 else rc & 0xFF


class Supervisor:
    def __init__(self, spec: AnchorSpec, bundle: BundleInfo, oci_conf: RuntimeSettings | None,
                 hooks: Hooks, backend: SlurmBackend, environ: dict[str, str],
                 job_opts: JobOptions, alloc_timeout_s: float | None) -> None:
        self.spec = spec
        self.bundle = bundle
        self.oci_conf = oci_conf
        self.hooks: Hooks = hooks
        self.backend = backend
        self.environ = environ
        self.job_opts = job_opts
        self.alloc_timeout_s = alloc_timeout_s
        self.root = Path(spec.root)
        self.log = structlog.get_logger()
        self.record = store.ContainerRecord(
            id=spec.container_id, bundle=str(bundle.path), rootfs=str(bundle.rootfs),
            oci_version=bundle.config.ociVersion, annotations=dict(bundle.config.annotations),
            status=Status.CREATING.value, anchor_pid=os.getpid(),
            anchor_start=store.process_start_time(os.getpid()), created=spec.created,
            owner=_user_name(os.getuid()), pid_file=spec.pid_file)
        self.alloc: Allocation | None = None
        self.ctx: HookContext | None = None
        self.staged_in = False
        self.step: asyncio.subprocess.Process | None = None
        self.pty_master: int | None = None
        self.pty_slave: int | None = None
        self.exit_code: int | None = None
        self.stderr_relay: StderrRelay | None = None
        self.delete_requested = False
        self._start = asyncio.Event()
        self._stop = asyncio.Event()
        self._stop_code: int | None = None
        self._stopped = asyncio.Event()
        self._launched = asyncio.Event()
        self._launch_error: ScrunError | None = None
        self._version_task: asyncio.Task[tuple[int, int]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._hook_running = False
        self.stop_reason = ""
        self._t0 = time.monotonic()

    # ---- helpers -------------------------------------------------------------------------
    def elapsed(self) -> float:
        return round(time.monotonic() - self._t0, 3)

    def _set_status(self, status: Status) -> None:
        self.record.status = status.value
        self.save()

    def save(self) -> None:
        with contextlib.suppress(OSError):
            store.save(self.root, self.record)

    def _event(self, msg: str, **kw: Any) -> None:
        self.log.info(msg, container_id=self.record.id, job_id=self.record.job_id or None,
                      elapsed_s=self.elapsed(), **kw)

    @property
    def status(self) -> Status:
        return Status(self.record.status)

    def job_env(self) -> dict[str, str]:
        """Job environment + SCRUN_* output variables (scrun.md §10.2)."""
        env = dict(self.alloc.env if self.alloc else self.environ)
        cfg = self.bundle.config
        ctx = self.ctx
        uid = ctx.user_id if ctx else os.getuid()
        gid = ctx.group_id if ctx else os.getgid()
        out = {
            "SCRUN_OCI_VERSION": cfg.ociVersion,
            "SCRUN_CONTAINER_ID": self.record.id,
            "SCRUN_PID": str(os.getpid()),
            "SCRUN_BUNDLE": str(self.bundle.path),
            "SCRUN_SUBMISSION_BUNDLE": self.spec.orig_bundle,
            "SCRUN_PID_FILE": self.spec.pid_file,
            "SCRUN_SOCKET": str(spool.container_dir(self.root, self.record.id)
                                / spool.SOCKET_NAME),
            "SCRUN_SPOOL_DIR": str(spool.container_dir(self.root, self.record.id)),
            "SCRUN_SUBMISSION_CONFIG_FILE": str(self.bundle.config_file),
            "SCRUN_USER": _user_name(uid),
            "SCRUN_USER_ID": str(uid),
            "SCRUN_GROUP": _group_name(gid),
            "SCRUN_GROUP_ID": str(gid),
            "SCRUN_ROOT": self.spec.root,
            "SCRUN_ROOTFS_PATH": str(self.bundle.rootfs),
            "SCRUN_SUBMISSION_ROOTFS_PATH": str(self.bundle.rootfs),
        }
        for key, value in cfg.annotations.items():
            out[f"SCRUN_ANNOTATION_{key}"] = value
        if self.spec.log_path:
            out["SCRUN_LOG_FILE"] = self.spec.log_path
            out["SCRUN_LOG_FORMAT"] = self.spec.log_format
        env.update(out)
        return env

    # ---- requests from the server / signal consumer ----------------------------------------
    async def request_start(self) -> int:
        status = self.status
        if status is Status.STOPPED or self._stop.is_set():
            raise ScrunError("cannot start a container that has stopped")
        if status is Status.RUNNING:
            return self.record.job_id
        if status is Status.CREATING:
            raise ScrunError("cannot start a container that is still being created")
        self._start.set()
        await self._launched.wait()
        if self._launch_error is not None:
            raise self._launch_error
        return self.record.job_id

    async def wait_stop_requested(self) -> None:
        await self._stop.wait()

    def request_stop(self, code: int, reason: str) -> None:
        if not self._stop.is_set():
            self._stop_code = code
            self.stop_reason = reason
            self._event("stop requested", reason=reason)
            self._stop.set()

    async def kill(self, sig: int) -> None:
        status = self.status
        if status is Status.STOPPED or (self._stop.is_set() and self.step is None):
            raise ContainerNotRunning()
        if status in (Status.CREATING, Status.CREATED) and self.step is None:
            if sig in _FATAL_BY_DEFAULT:
                self.request_stop(128 + sig, f"signal {sig} before start")
            return
        await self.signal_container(sig)

    async def delete(self, force: bool) -> None:
        if self.status is Status.RUNNING and not force:
            raise ContainerStillRunning()
        self.delete_requested = True
        if self.step is not None and self.step.returncode is None:
            self._event("delete: killing the container")
            await self.signal_container(int(signal_mod.SIGKILL))
        self.request_stop(128 + int(signal_mod.SIGKILL), "delete")
        await self._stopped.wait()

    async def signal_container(self, sig: int) -> None:
        alloc = self.alloc
        if alloc is None or self.step is None or self.step.returncode is not None:
            return
        step_id = await self._step_id()
        env = self.job_env()
        if self.oci_conf is None or not self.oci_conf.ignore_file_config_json:
            argv = self._runtime_signal_argv(sig, step_id)
            if argv is not None:
                # Right after start the runtime may not have created the container yet;
                # retry briefly instead of cancelling the step, which Slurm 22.05 cannot
                # clean up in that window (the node drains with "Kill task failed").
                for _attempt in range(RUNTIME_SIGNAL_ATTEMPTS):
                    rc, out = await self.backend.run(argv, env, timeout_s=30)
                    self._event("signal delivered through the runtime", signal=sig, rc=rc,
                                output=out.strip()[-300:])
                    if rc == 0 or self.step is None or self.step.returncode is not None:
                        return
                    await asyncio.sleep(0.25)
        argv = slurm_argv.build_scancel_argv(alloc.job_id, signal=sig, step_id=step_id)
        rc, out = await self.backend.run(argv, timeout_s=30)
        self._event("signal delivered with scancel", signal=sig, rc=rc, output=out.strip())

    def _runtime_signal_argv(self, sig: int, step_id: int | None) -> list[str] | None:
        """The helper step that runs oci.conf's RunTimeKill with `sig` on the job's nodes;
        None when there is no usable RunTimeKill (unknown step, unexpandable tokens)."""
        pattern = self.oci_conf.runtime_kill if self.oci_conf else None
        if not pattern or step_id is None or self.alloc is None:
            return None
        try:
            cmd = slurm_argv.signal_shell_command(pattern, job_id=self.alloc.job_id,
                                                  step_id=step_id, signal=sig)
        except ValueError:
            return None
        return slurm_argv.build_command_step_argv(
            job_id=self.alloc.job_id, command=cmd, srun_path=self._srun_path(),
            srun_args=self._srun_args(), name="scrun-signal")

    async def _step_id(self) -> int | None:
        if self.record.step_id is not None or self.alloc is None:
            return self.record.step_id
        for _ in range(20):
            try:
                rc, out = await self.backend.run(
                    slurm_argv.build_step_list_argv(self.alloc.job_id), timeout_s=15)
            except SlurmError:
                return None
            ids = []
            for line in out.splitlines():
                step, _, name = line.strip().partition("|")
                _, _, sid = step.partition(".")
                if name == "scrun" and sid.isdigit():
                    ids.append(int(sid))
            if rc == 0 and ids:
                self.record.step_id = max(ids)
                self.save()
                return self.record.step_id
            if self.step is None or self.step.returncode is not None:
                return None
            await asyncio.sleep(0.1)
        return None

    def _srun_path(self) -> str:
        return self.oci_conf.srun_path if self.oci_conf else "srun"

    def _srun_args(self) -> list[str]:
        return list(self.oci_conf.srun_args) if self.oci_conf else []

    # ---- lifecycle -------------------------------------------------------------------------
    async def create(self) -> None:
        """Allocate, stage in; on return the container is `created`."""
        self.save()
        if self.bundle.config.process.terminal and self.spec.console_socket:
            from scrun_py.anchor.console import open_pty

            self.pty_master, self.pty_slave, _ = open_pty()
        await self.allocate()
        holder_watch = asyncio.create_task(self._holder_gone())

        def job_ended(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and self.status is Status.CREATING:
                self.request_stop(1, "the job ended while the container was being created")

        holder_watch.add_done_callback(job_ended)
        self._tasks.append(holder_watch)
        end, uid, gid = await self._job_info()
        self._schedule_time_limit(end)
        await self.stage_in(uid, gid)
        if self.pty_master is not None:
            from scrun_py.anchor.console import send_master

            send_master(Path(self.spec.console_socket), self.pty_master,
                        os.ttyname(self.pty_slave) if self.pty_slave is not None else "")
            os.close(self.pty_master)
            self.pty_master = None
        if self.spec.pid_file:
            spool.write_pid_file(Path(self.spec.pid_file), os.getpid())
        self._set_status(Status.CREATED)
        self._event("container created")

    async def allocate(self) -> None:
        # learn the Slurm version (for --container-id) while the job is being allocated
        self._version_task = asyncio.create_task(self._slurm_version())
        existing = self.environ.get("SLURM_JOB_ID", "")
        self._event("allocation started")
        if existing:
            if not existing.isdigit():
                raise AllocationFailed(f"SLURM_JOB_ID is not a job id: {existing!r}")
            env = dict(self.environ)
            self.alloc = Allocation(job_id=int(existing), env=env, owned=False)
            self.record.job_id = int(existing)
            self.record.owns_job = False
            rc, out = await self.backend.run(slurm_argv.build_job_state_argv(int(existing)),
                                             timeout_s=30)
            if rc != 0 or out.strip() not in ("RUNNING", "CONFIGURING"):
                raise AllocationFailed(
                    f"SLURM_JOB_ID={existing} is not a running job ({out.strip() or rc})")
        else:
            def on_job_id(job_id: int) -> None:
                self.record.job_id = job_id
                self.save()

            env = dict(self.environ)
            env[slurm_argv.ABANDON_ENV] = str(self._abandon_script())
            self.alloc = await self.backend.allocate(self.job_opts.alloc, env, on_job_id,
                                                     self.alloc_timeout_s)
            self.record.job_id = self.alloc.job_id
        self.save()
        self._event("allocation granted")

    async def stage_in(self, uid: int, gid: int) -> None:
        assert self.alloc is not None
        self.ctx = HookContext(
            container_id=self.record.id, bundle=str(self.bundle.path),
            orig_bundle=self.spec.orig_bundle, root_path=str(self.bundle.rootfs),
            orig_root_path=str(self.bundle.rootfs),
            spool_dir=str(spool.container_dir(self.root, self.record.id)),
            config_file=str(self.bundle.config_file), job_id=self.alloc.job_id,
            user_id=uid, group_id=gid, env={}, remote_argv=self._remote_argv)
        self.ctx.env = self.job_env()
        if isinstance(self.hooks, NoHooks):
            return
        self._event("stage_in started")
        self.staged_in = True
        self._hook_running = True
        try:
            await _in_daemon_thread(self.hooks.stage_in, self.ctx)
        except Exception:
            self._hook_running = False
            raise
        # on cancellation (create interrupted) the hook is still running in its thread
        self._hook_running = False
        self.record.bundle = self.ctx.bundle
        self.record.rootfs = self.ctx.root_path
        self.save()
        self._event("stage_in finished", bundle=self.ctx.bundle)

    async def _job_info(self) -> tuple[float | None, int, int]:
        """The job's end time (owned jobs: for the time-limit watch) and uid/gid (rootless
        engines run us as uid 0 in a user namespace), from one squeue, asked only when
        one of them is needed."""
        assert self.alloc is not None
        uid, gid = os.getuid(), os.getgid()
        userns = _in_user_namespace()
        if not self.alloc.owned and not userns:
            return None, uid, gid
        try:
            rc, out = await self.backend.run(
                slurm_argv.build_job_info_argv(self.alloc.job_id), timeout_s=15)
        except SlurmError:
            return None, uid, gid
        if rc != 0:
            return None, uid, gid
        end_s, _, ids = out.strip().partition("|")
        end = _parse_slurm_time(end_s) if self.alloc.owned else None
        if userns:
            uid_s, _, gid_s = ids.partition("|")
            try:
                uid, gid = int(uid_s), int(gid_s)
            except ValueError:
                pass
        return end, uid, gid

    def _schedule_time_limit(self, end: float | None) -> None:
        """Stop the container through the runtime shortly before the job's time limit.

        Slurm's own time-limit kill cannot tear down a running container step on
        22.05 (the step turns unkillable and the node drains), so we deliver TERM,
        then KILL, through the runtime ourselves; the job then ends FAILED with the
        container's exit code (143/137) instead of TIMEOUT.
        """
        if end is None:
            return
        delay = end - time.time() - TIME_LIMIT_MARGIN_S
        self._event("time limit watch", stop_in_s=round(delay, 1))
        self._tasks.append(asyncio.create_task(self._stop_at_time_limit(max(delay, 0.0))))

    async def _stop_at_time_limit(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if self.status is Status.CREATING:
            self.request_stop(1, "time limit reached during create")
            return
        if self.step is None or self.step.returncode is not None:
            if self.status is Status.CREATED:
                self.request_stop(128 + int(signal_mod.SIGTERM), "time limit reached")
            return
        self._event("time limit reached: stopping the container")
        await self.signal_container(int(signal_mod.SIGTERM))
        try:
            await asyncio.wait_for(asyncio.shield(self.step.wait()), TIME_LIMIT_GRACE_S)
        except TimeoutError:
            await self.signal_container(int(signal_mod.SIGKILL))

    async def _slurm_version(self) -> tuple[int, int]:
        try:
            return await self.backend.version()
        except SlurmError:
            return (22, 5)  # oldest supported: no --container-id

    def _remote_argv(self, command: str) -> list[str]:
        assert self.alloc is not None
        return slurm_argv.build_command_step_argv(
            job_id=self.alloc.job_id, command=command, srun_path=self._srun_path(),
            srun_args=self._srun_args())

    async def launch(self) -> None:
        assert self.alloc is not None
        bundle = self.ctx.bundle if self.ctx else str(self.bundle.path)
        version = await (self._version_task or self._slurm_version())
        argv = slurm_argv.build_srun_argv(
            job_id=self.alloc.job_id, container_id=self.record.id, bundle=bundle,
            args=self.bundle.config.process.args, step_opts=self.job_opts.step,
            srun_path=self._srun_path(), srun_args=self._srun_args(),
            pty=self.pty_slave is not None or (self.bundle.config.process.terminal
                                               and os.isatty(0)),
            container_id_flag=version >= (23, 2))
        self._event("launch started", argv=argv)
        relay = StderrRelay(2) if self.pty_slave is None else None
        try:
            self.step = await self.backend.launch_step(
                argv, self.job_env(), stdio=(0, 1, relay.write_fd if relay else 2),
                pty_slave=self.pty_slave)
        except BaseException:
            if relay is not None:
                relay.close()
            raise
        if relay is not None:
            relay.start()
            self.stderr_relay = relay
        if self.pty_slave is not None:
            os.close(self.pty_slave)
            self.pty_slave = None
        self._set_status(Status.RUNNING)
        self._event("launch finished", srun_pid=self.step.pid)
        self._tasks.append(asyncio.create_task(self._write_abandon_script()))

    def _abandon_script(self) -> Path:
        return spool.container_dir(self.root, self.record.id) / slurm_argv.ABANDON_FILE

    async def _write_abandon_script(self) -> None:
        """What the allocation holder runs if this anchor dies: SIGKILL the container
        through the runtime (see slurm/argv.py HOLDER_SCRIPT)."""
        if self.alloc is None or not self.alloc.owned:
            return
        argv = self._runtime_signal_argv(int(signal_mod.SIGKILL), await self._step_id())
        if argv is None:
            return
        script = "timeout 30 " + " ".join(shlex.quote(a) for a in argv) + "\n"
        with contextlib.suppress(OSError):
            spool.write_atomic(self._abandon_script(), script.encode(), 0o700)

    async def run(self) -> int:
        """The whole lifecycle after a successful create; returns the exit code."""
        stop = asyncio.create_task(self._stop.wait())
        holder = asyncio.create_task(self._holder_gone())
        start = asyncio.create_task(self._start.wait())
        await asyncio.wait({stop, start, holder}, return_when=asyncio.FIRST_COMPLETED)
        if start.done() and not self._stop.is_set() and not holder.done():
            try:
                await self.launch()
            except ScrunError as exc:
                self._launch_error = exc
                self.request_stop(1, f"launch failed: {exc}")
            finally:
                self._launched.set()
            if self.step is not None:
                waiter = asyncio.create_task(self.step.wait())
                await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not waiter.done():
                    # stop requested while running (signal to the anchor, delete)
                    await self.signal_container(int(signal_mod.SIGKILL))
                    try:
                        await asyncio.wait_for(asyncio.shield(waiter), KILL_GRACE_S)
                    except TimeoutError:
                        if self.alloc:
                            await self.backend.run(slurm_argv.build_scancel_argv(
                                self.alloc.job_id, step_id=self.record.step_id), timeout_s=15)
                        with contextlib.suppress(ProcessLookupError):
                            self.step.kill()
                        await waiter
                rc = self.step.returncode
                assert rc is not None
                if self.stderr_relay is not None:
                    # the container's last stderr bytes reach the engine before its exit
                    await self.stderr_relay.drain(STDERR_DRAIN_S)
                    self.stderr_relay.close()
                self.exit_code = wait_status_to_exit_code(rc)
                if self.exit_code == 0 and not self._stop.is_set() and self._job_revoked():
                    # the job ended underneath a running step (scancel, node failure):
                    # srun gives up waiting for the task and exits 0, but the
                    # container did not finish; report it as killed, like Slurm did
                    self.exit_code = 128 + int(signal_mod.SIGKILL)
                    self._event("job ended while the container ran",
                                stderr=self.alloc.holder_stderr[-3:] if self.alloc else [])
                self._event("step finished", exit_code=self.exit_code)
        elif holder.done() and not self._stop.is_set():
            self.request_stop(1, "job ended before the container started")
        self._launched.set()
        for t in (stop, holder, start):
            t.cancel()
        if self.exit_code is None:
            self.exit_code = self._stop_code if self._stop_code is not None else 1
        await self.teardown(self.exit_code)
        return self.exit_code

    def _job_revoked(self) -> bool:
        alloc = self.alloc
        if alloc is None or not alloc.owned:
            return False
        if alloc.poll_stderr is not None:
            alloc.poll_stderr()
        return alloc.revoked or (alloc.holder is not None and alloc.holder.returncode is not None)

    async def _holder_gone(self) -> None:
        if self.alloc is not None and self.alloc.holder is not None:
            await self.alloc.holder.wait()
            if self.alloc.poll_stderr is not None:
                self.alloc.poll_stderr()
            self._event("job allocation ended", stderr=self.alloc.holder_stderr[-3:])
        else:
            await asyncio.Event().wait()

    async def teardown(self, exit_code: int) -> None:
        """stage_out, end the job, mark stopped, remove socket and pid file."""
        self.record.exit_code = exit_code
        for task in self._tasks:
            task.cancel()
        if self.staged_in and self.ctx is not None:
            self._event("stage_out started")
            try:
                rc = await _in_daemon_thread(self.hooks.stage_out, self.ctx)
                self._event("stage_out finished", rc=rc)
            except Exception as exc:  # stage_out's result is only logged (as Slurm does)
                self.log.error("stage_out failed", error=str(exc), container_id=self.record.id)
        self.staged_in = False
        await self.end_job(exit_code)
        self._close_pty()
        self.hooks.close()
        if self.spec.pid_file:
            spool.remove_pid_file(Path(self.spec.pid_file), os.getpid())
        cdir = spool.container_dir(self.root, self.record.id)
        with contextlib.suppress(OSError):
            (cdir / spool.SOCKET_NAME).unlink()
        self.record.anchor_pid = 0
        self._set_status(Status.STOPPED)
        if self.delete_requested:
            spool.remove_tree(cdir)
        self._event("container stopped", exit_code=exit_code)
        audit.record(audit.AuditSettings(self.spec.audit_file, self.spec.audit_syslog), "exit",
                     container_id=self.record.id, engine=self.spec.engine,
                     job_id=self.record.job_id or None, bundle=self.record.bundle,
                     exit_code=exit_code)
        self._stopped.set()

    async def end_job(self, exit_code: int) -> None:
        alloc = self.alloc
        if alloc is None:
            return
        if not alloc.owned:
            self._event("existing allocation left running")
            return
        self._event("job end started")
        try:
            await self.backend.release(alloc, exit_code, RELEASE_TIMEOUT_S)
        except SlurmError as exc:
            self.log.error("ending the job failed", error=str(exc), job_id=alloc.job_id)
        self._event("job end finished")

    async def abort_create(self, err: BaseException) -> None:
        """create failed: end whatever exists and remove every trace."""
        self.log.info("create failed", error=str(err), container_id=self.record.id)
        for task in self._tasks:
            task.cancel()
        hook_hung = self._hook_running
        if hook_hung:
            # stage_in still runs in its thread: the Lua state is busy, so no stage_out
            self.staged_in = False
        if self.staged_in and self.ctx is not None:
            with contextlib.suppress(Exception):
                await _in_daemon_thread(self.hooks.stage_out, self.ctx)
        self.staged_in = False
        if self.alloc is not None:
            await self.end_job(1)
        elif self.record.job_id and self.record.owns_job:
            with contextlib.suppress(SlurmError):
                await self.backend.run(slurm_argv.build_scancel_argv(self.record.job_id))
        if hook_hung:
            kill_descendants()  # the commands the hung hook started (the job has ended)
        self._close_pty()
        if not hook_hung:
            self.hooks.close()
        if self.spec.pid_file:
            spool.remove_pid_file(Path(self.spec.pid_file), os.getpid())
        spool.remove_tree(spool.container_dir(self.root, self.record.id))
        self._stopped.set()

    def _close_pty(self) -> None:
        for fd in (self.pty_master, self.pty_slave):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pty_master = self.pty_slave = None

    def snapshot(self) -> dict[str, Any]:
        return {"status": self.status.value, "job_id": self.record.job_id,
                "bundle": self.record.bundle}


async def _in_daemon_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking hook in a daemon thread: a hook that hangs cannot keep the anchor
    alive after teardown (asyncio.to_thread's pool threads would be joined at exit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def work() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting task
            loop.call_soon_threadsafe(_settle, fut, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, fut, result, None)

    threading.Thread(target=work, name="scrun-hook", daemon=True).start()
    return await fut


def _settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def _parse_slurm_time(text: str) -> float | None:
    """squeue's %e (local time, e.g. 2026-11-29T12:45:00) → epoch; None if unlimited."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def kill_descendants() -> None:
    """SIGKILL every process below this one (a hung hook's commands)."""
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    stack = list(children.get(me, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        with contextlib.suppress(OSError):
            os.kill(pid, signal_mod.SIGKILL)


def _in_user_namespace() -> bool:
    """True unless this is the initial user namespace (uid_map "0 0 4294967295")."""
    try:
        with open("/proc/self/uid_map") as fh:
            return fh.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return True


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
