"""What the anchor knows about its container: the record in state.json, the job
environment the hooks and the step see, the Lua hook calls, the pty and pid file.

No lifecycle decisions here: `anchor/lifecycle.py` makes them.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from scrun_py.anchor.handoff import AnchorSpec, BundleInfo
from scrun_py.base import callerpath, procs, threads
from scrun_py.base.layout import SOCKET_NAME
from scrun_py.base.logs import Logger
from scrun_py.base.threads import Cancel
from scrun_py.container import spool
from scrun_py.container.record import ContainerRecord
from scrun_py.container.status import Status
from scrun_py.hooks.context import HookContext, HookJob, HookPaths
from scrun_py.hooks.interface import Hooks, NoHooks
from scrun_py.slurm.backend import Allocation

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

# state's annotations while the job waits in Slurm's queue: its state (PENDING) and
# Slurm's reason (squeue's %r); removed once the job runs
JOB_STATE_ANNOTATION = "org.scrun-py.job.state"
JOB_REASON_ANNOTATION = "org.scrun-py.job.reason"


class SupervisedContainer:
    """The container the anchor supervises (the on-disk handle the verbs use is
    container/handle.py's Container)."""

    def __init__(self, spec: AnchorSpec, bundle: BundleInfo, hooks: Hooks,
                 environ: dict[str, str], log: Logger) -> None:
        self.spec = spec
        self.bundle = bundle
        self.hooks = hooks
        self.environ = environ
        self.root = spec.root
        self.dir = spool.container_dir(self.root, spec.container_id)
        self.log = log
        self._saving = threading.Lock()  # state.json is written from several threads
        self.record = ContainerRecord(
            id=spec.container_id, bundle=str(bundle.path), rootfs=str(bundle.rootfs),
            oci_version=bundle.config.ociVersion, annotations=dict(bundle.config.annotations),
            status=Status.CREATING.value, anchor_pid=os.getpid(),
            anchor_start=procs.process_start_time(os.getpid()), created=spec.created,
            owner=procs.user_name(os.getuid()), pid_file=spec.pid_file)
        # the container's pid (state, the pid file): the namespace holder's once set_pid
        # has named it (anchor/nsholder.py), else the anchor's
        self.pid = os.getpid()
        self.ctx: HookContext | None = None
        self.staged_in = False  # stage_out is owed
        self.hook_running = False  # stage_in still runs in its thread
        self.pty_master: int | None = None
        self.pty_slave: int | None = None
        # create's stderr, inherited (/dev/null with a --console-socket): a user's
        # terminal for `run` or a `create` typed at a shell, a pipe or file for engines
        self.stderr_fd = 2
        self._t0 = time.monotonic()

    # ---- record and log ----------------------------------------------------------------------
    def save(self) -> None:
        with self._saving, contextlib.suppress(OSError):
            spool.save_record(self.root, self.record)

    def set_status(self, status: Status) -> None:
        self.record.status = status.value
        self.save()

    def event(self, msg: str, **kw: Any) -> None:
        self.log.info(msg, container_id=self.record.id, job_id=self.record.job_id or None,
                      elapsed_s=round(time.monotonic() - self._t0, 3), **kw)

    def tell_terminal(self, msg: str) -> None:
        """`scrun-py: msg` on create's stderr when it is a terminal, as salloc talks to a
        user; never otherwise: engines read create's stderr."""
        try:
            if os.isatty(self.stderr_fd):
                os.write(self.stderr_fd, f"scrun-py: {msg}\n".encode())
        except OSError:
            pass

    def note_job_wait(self, state: str, reason: str) -> None:
        """state's annotations say the job waits in Slurm's queue, and why ('': unknown);
        saved."""
        notes = {**self.record.annotations, JOB_STATE_ANNOTATION: state}
        if reason:
            notes[JOB_REASON_ANNOTATION] = reason
        else:
            notes.pop(JOB_REASON_ANNOTATION, None)
        # a new dict: save() in another thread may be serializing the old one
        self.record.annotations = notes
        self.save()

    def clear_job_wait(self) -> None:
        """Drop note_job_wait's annotations (config.json's own values for those keys come
        back); not saved."""
        own = self.bundle.config.annotations
        keys = (JOB_STATE_ANNOTATION, JOB_REASON_ANNOTATION)
        if any(self.record.annotations.get(k) != own.get(k) for k in keys):
            notes = {k: v for k, v in self.record.annotations.items() if k not in keys}
            notes.update({k: own[k] for k in keys if k in own})
            self.record.annotations = notes

    def audit_exit(self, exit_code: int) -> None:
        from scrun_py.site import audit

        audit.record(audit.AuditSettings(self.spec.audit_file, self.spec.audit_syslog), "exit",
                     container_id=self.record.id, engine=self.spec.engine,
                     job_id=self.record.job_id or None, bundle=self.record.bundle,
                     exit_code=exit_code)

    # ---- job environment ---------------------------------------------------------------------
    def job_env(self, alloc: Allocation | None) -> dict[str, str]:
        """Job environment + the SCRUN_* variables Slurm's scrun sets for hooks and step."""
        env = dict(alloc.env if alloc else self.environ)
        cfg = self.bundle.config
        uid = self.ctx.user_id if self.ctx else os.getuid()
        gid = self.ctx.group_id if self.ctx else os.getgid()
        env.update({
            "SCRUN_OCI_VERSION": cfg.ociVersion,
            "SCRUN_CONTAINER_ID": self.record.id,
            "SCRUN_PID": str(os.getpid()),
            "SCRUN_BUNDLE": str(self.bundle.path),
            "SCRUN_SUBMISSION_BUNDLE": self.spec.orig_bundle,
            "SCRUN_PID_FILE": self.spec.pid_file,
            "SCRUN_SOCKET": os.path.join(self.dir, SOCKET_NAME),
            "SCRUN_SPOOL_DIR": str(self.dir),
            "SCRUN_SUBMISSION_CONFIG_FILE": str(self.bundle.config_file),
            "SCRUN_USER": procs.user_name(uid),
            "SCRUN_USER_ID": str(uid),
            "SCRUN_GROUP": procs.group_name(gid),
            "SCRUN_GROUP_ID": str(gid),
            "SCRUN_ROOT": self.spec.root,
            "SCRUN_ROOTFS_PATH": str(self.bundle.rootfs),
            "SCRUN_SUBMISSION_ROOTFS_PATH": str(self.bundle.rootfs),
        })
        for key, value in cfg.annotations.items():
            env[f"SCRUN_ANNOTATION_{key}"] = value
        if self.spec.log_path:
            env["SCRUN_LOG_FILE"] = self.spec.log_path
            env["SCRUN_LOG_FORMAT"] = self.spec.log_format
        return env

    # ---- hooks -------------------------------------------------------------------------------
    def stage_in(self, alloc: Allocation, uid: int, gid: int,
                 remote_argv: Callable[[str], list[str]], cancel: Cancel) -> None:
        """Run the stage_in hook; Cancelled once `cancel` is set (the hook goes on in its
        thread: `hook_running` stays true)."""
        self.ctx = ctx = HookContext(
            self.record.id,
            HookPaths(bundle=str(self.bundle.path), orig_bundle=self.spec.orig_bundle,
                      root_path=str(self.bundle.rootfs), orig_root_path=str(self.bundle.rootfs),
                      spool_dir=str(self.dir), config_file=str(self.bundle.config_file)),
            HookJob(job_id=alloc.job_id, user_id=uid, group_id=gid, env={},
                    remote_argv=remote_argv))
        ctx.env = self.job_env(alloc)
        if isinstance(self.hooks, NoHooks):
            return
        self.event("stage_in started")
        self.staged_in = True
        self.hook_running = True
        try:
            threads.call(lambda: self.hooks.stage_in(ctx), cancel, "scrun-stage-in")
        except threads.Cancelled:
            raise
        except Exception:
            self.hook_running = False
            raise
        self.hook_running = False
        self.record.bundle = self.ctx.bundle
        self.record.rootfs = self.ctx.root_path
        self.save()
        self.event("stage_in finished", bundle=self.ctx.bundle)

    def stage_out(self) -> None:
        """Run stage_out once if stage_in ran; its result is only logged (as Slurm does)."""
        owed, self.staged_in, ctx = self.staged_in, False, self.ctx
        if not owed or ctx is None:
            return
        self.event("stage_out started")
        try:
            rc = self.hooks.stage_out(ctx)
            self.event("stage_out finished", rc=rc)
        except Exception as exc:
            self.log.error("stage_out failed", error=str(exc), container_id=self.record.id)

    # ---- pty and pid file --------------------------------------------------------------------
    def open_console(self) -> None:
        if self.bundle.config.process.terminal and self.spec.console_socket:
            from scrun_py.anchor.console import open_pty

            self.pty_master, self.pty_slave, _ = open_pty()

    def send_console(self) -> None:
        """Hand the pty master to the engine's --console-socket."""
        if self.pty_master is None:
            return
        from scrun_py.anchor.console import send_master

        send_master(self.spec.console_socket, self.pty_master,
                    os.ttyname(self.pty_slave) if self.pty_slave is not None else "")
        os.close(self.pty_master)
        self.pty_master = None

    def close_pty(self) -> None:
        for fd in (self.pty_master, self.pty_slave):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pty_master = self.pty_slave = None

    def set_pid(self, pid: int) -> None:
        """Report `pid` as the container's (the namespace holder's); saved with the
        record's first write (create's)."""
        self.pid = self.record.pid = pid

    def write_pid_file(self) -> None:
        if self.spec.pid_file:
            spool.write_pid_file(self.spec.pid_file, self.pid)

    def remove_pid_file(self) -> None:
        if self.spec.pid_file:
            callerpath.remove_pid_file(self.spec.pid_file, self.pid)

    def abandon_script(self) -> str:
        from scrun_py.base.layout import ABANDON_FILE

        return os.path.join(self.dir, ABANDON_FILE)

