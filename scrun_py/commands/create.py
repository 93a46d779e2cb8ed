"""`create`: validate, make the spool dir, start the anchor, wait until the container
is created (job allocated, stage_in done) or creation failed."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from scrun_py import audit, policy, procs, site_conf, spool, store
from scrun_py.anchor import readiness
from scrun_py.anchor.spec import (
    AnchorSpec,
    BundleInfo,
    ConfigInfo,
    ProcessInfo,
    RuntimeSettings,
)
from scrun_py.errors import AnchorStartupFailed, ScrunError, rebuild
from scrun_py.logs import rfc3339_now
from scrun_py.settings import Invocation

if TYPE_CHECKING:
    from scrun_py.oci.bundle import Bundle


class AnchorProcess:
    """The anchor, a child of this process (forked, or started through `unshare`)."""

    def __init__(self, pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._popen = popen

    def wait(self) -> int:
        if self.returncode is None:
            if self._popen is not None:
                self.returncode = self._popen.wait()
            else:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)


def run(inv: Invocation, container_id: str, bundle: str | None, pid_file: str | None,
        console_socket: str | None) -> AnchorProcess:
    """Create the container; return the anchor process handle (used by `run`)."""

    spool.validate_id(container_id)
    site = site_conf.load(inv.slurm_conf_path())
    settings = audit.load_settings(inv.slurm_conf_path(), site)
    applied: list[str] = []
    try:
        site_policy = policy.load_policy(site)  # a broken policy is audited as a failure
        anchor = _create(inv, container_id, bundle, pid_file, console_socket, settings,
                         site_policy, applied)
    except ScrunError as exc:
        audit.record(settings, "create-failed", container_id=container_id,
                     engine=audit.detect_engine(), bundle=bundle, error=str(exc))
        raise
    job_id = None
    try:
        job_id = store.load(inv.root, container_id).job_id
    except ScrunError:
        pass
    audit.record(settings, "create", container_id=container_id, engine=audit.detect_engine(),
                 job_id=job_id, bundle=os.path.abspath(bundle) if bundle else os.getcwd(),
                 policy=applied or None)
    return anchor


def _create(inv: Invocation, container_id: str, bundle: str | None, pid_file: str | None,
            console_socket: str | None,
            settings: audit.AuditSettings, site_policy: policy.Policy,
            applied: list[str]) -> AnchorProcess:
    from scrun_py.oci.bundle import load_bundle

    bundle_path = os.path.abspath(bundle) if bundle else os.getcwd()
    loaded = load_bundle(bundle_path)
    if not site_policy.empty:
        applied.extend(_apply_policy(inv, container_id, loaded, site_policy))
    pid_path = os.path.abspath(pid_file) if pid_file else ""
    if pid_path and not os.path.isdir(os.path.dirname(pid_path)):
        raise ScrunError(f"pid file directory does not exist: {os.path.dirname(pid_path)}")
    if console_socket and not loaded.config.process.terminal:
        console_socket = None  # runc ignores it when no terminal is requested
    runtime = RuntimeSettings(**_runtime_settings(inv))
    bundle_info = BundleInfo(
        path=loaded.path, rootfs=loaded.rootfs, imported_env=loaded.imported_env(),
        config=ConfigInfo(ociVersion=loaded.config.ociVersion,
                          process=ProcessInfo(args=list(loaded.config.process.args),
                                              terminal=loaded.config.process.terminal),
                          annotations=dict(loaded.config.annotations)))
    spool.ensure_root(inv.root)
    cdir = spool.make_container_dir(inv.root, container_id)
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    spec = AnchorSpec(
        container_id=container_id, root=str(inv.root),
        orig_bundle=os.path.abspath(bundle) if bundle else "", pid_file=pid_path,
        console_socket=os.path.abspath(console_socket) if console_socket else "",
        log_path=str(inv.log_path) if inv.log_path else "", log_format=inv.log_format,
        debug=inv.debug, verbosity=inv.verbosity, log_level=inv.log_level,
        slurm_conf=str(inv.slurm_conf_path()),
        ready_fd=write_fd, created=rfc3339_now(), bundle_info=bundle_info.to_dict(),
        runtime=dataclasses.asdict(runtime), audit_file=settings.file,
        audit_syslog=settings.syslog, engine=audit.detect_engine())
    try:
        anchor = _start_anchor(inv, spec, read_fd)
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        spool.remove_tree(cdir)
        raise AnchorStartupFailed(f"cannot start the container anchor: {exc.strerror}") from exc
    os.close(write_fd)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            anchor.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        result = readiness.read_result(read_fd, None)
    finally:
        os.close(read_fd)
    if result is not None and result.get("ok"):
        return anchor
    rc = anchor.wait()
    spool.remove_tree(cdir)
    if result is None:
        raise AnchorStartupFailed(f"container anchor exited during create (status {rc})")
    raise rebuild(str(result.get("kind", "ScrunError")),
                  str(result.get("message", "create failed")))


def _runtime_settings(inv: Invocation) -> dict[str, Any]:
    """The oci.conf settings the anchor uses: read without pydantic when the file is
    plain (oci_conf_syntax), else through the full model, which words any problem."""
    from scrun_py.oci_conf_syntax import plain_settings, read_text

    path = inv.slurm_conf_path().parent / "oci.conf"
    text = read_text(path)
    plain = plain_settings(text)
    if plain is not None:
        return plain
    from scrun_py.oci_conf import parse_oci_conf

    conf = parse_oci_conf(text, source=str(path))
    return {"runtime_kill": conf.runtime_kill,
            "ignore_file_config_json": conf.ignore_file_config_json,
            "srun_path": conf.srun_path, "srun_args": list(conf.srun_args),
            "stdio_debug": conf.stdio_debug, "file_debug": conf.file_debug,
            "syslog_debug": conf.syslog_debug}


def _start_anchor(inv: Invocation, spec: AnchorSpec, read_fd: int) -> AnchorProcess:
    """Start the anchor in a session of its own, holding only the readiness pipe.

    It is forked from this process (no second interpreter: create's imports are
    already done and the anchor needs few more); only when we are root inside a user
    namespace it is a new interpreter behind `unshare` (see userns_prefix).
    """
    env = None
    if inv.slurm_conf is not None:
        # -f names the cluster for the Slurm commands the anchor runs too: engines
        # (dockerd's shim, conmon) do not pass SLURM_CONF through to the runtime.
        env = {**os.environ, "SLURM_CONF": str(inv.slurm_conf)}
    # with a terminal the container's stdio is the pty: like runc's init, the anchor
    # must not hold the caller's stdio open (containerd's shim reads create's
    # stdout/stderr to EOF before it takes the pty master and calls start)
    prefix = userns_prefix()
    if prefix:
        stdio = subprocess.DEVNULL if spec.console_socket else None
        popen = subprocess.Popen(
            [*prefix, sys.executable, "-P", "-m", "scrun_py.anchor", spec.to_json()],
            pass_fds=(spec.ready_fd,), start_new_session=True, close_fds=True, env=env,
            stdin=stdio, stdout=stdio, stderr=stdio)
        return AnchorProcess(popen.pid, popen)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return AnchorProcess(pid)
    rc = 1
    try:  # the anchor: never returns into create
        os.close(read_fd)
        os.setsid()
        if spec.console_socket:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(null)
        os.closerange(3, spec.ready_fd)
        os.closerange(spec.ready_fd + 1, 1 << 20)
        if env is not None:
            os.environ["SLURM_CONF"] = env["SLURM_CONF"]
        from scrun_py.anchor.__main__ import run_anchor

        rc = run_anchor(spec)
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(rc)


def _apply_policy(inv: Invocation, container_id: str, loaded: Bundle,
                  site_policy: policy.Policy) -> list[str]:
    """Enforce the site policy on config.json; return what was rewritten.

    Runs before the anchor exists: a refusal leaves nothing to clean up, and stage_in
    (and the node's runtime) only ever see the enforced config.json.
    """
    from scrun_py.oci.bundle import write_config

    outcome = policy.enforce(site_policy, loaded.raw, bundle=str(loaded.path),
                             rootfs=str(loaded.rootfs), subject=policy_subject())
    if outcome.changes:
        write_config(loaded, outcome.config)
        if inv.log_path:
            from scrun_py.logs import append_line, format_record

            append_line(inv.log_path, format_record(
                "info", "site policy rewrote config.json", inv.log_format,
                {"id": container_id, "changes": outcome.changes}))
    return outcome.changes


def policy_subject() -> policy.Subject:
    """The real user behind this create (rootless podman runs us as its namespace's 0)."""
    import pwd

    uid = os.getuid()
    if uid == 0:
        uid = procs.ns_root_host_id("uid")
    try:
        pw = pwd.getpwuid(uid)
        return policy.Subject(uid=uid, user=pw.pw_name, home=pw.pw_dir)
    except KeyError:
        return policy.Subject(uid=uid, user=str(uid), home="/nonexistent")


def userns_prefix() -> list[str]:
    """Run the anchor as the real user when we are root only inside a user namespace.

    Rootless podman runs the runtime as uid 0 of its user namespace.  munge then
    vouches for the real uid, but salloc/srun put getuid()/getgid() (0) in their
    requests and slurmctld rejects them ("Invalid user id").  In a nested user
    namespace that maps the real uid/gid to namespace 0, the anchor and every Slurm
    command it runs see the real ids.  The pid stays the same (unshare execs).
    """
    if os.getuid() != 0:
        return []
    uid = procs.ns_root_host_id("uid")
    gid = procs.ns_root_host_id("gid")
    if uid == 0:
        return []
    return ["unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--"]
