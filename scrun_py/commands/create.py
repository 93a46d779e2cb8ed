"""`create`: validate, make the spool dir, start the anchor, wait until the container
is created (job allocated, stage_in done) or creation failed."""

from __future__ import annotations

import os

from scrun_py.anchor import launch, readiness
from scrun_py.anchor.handoff import (
    AnchorSpec,
    BundleInfo,
    ConfigInfo,
    ProcessInfo,
    RuntimeSettings,
)
from scrun_py.anchor.launch import AnchorProcess, EarlyAnchor, Started
from scrun_py.base import procs, signames
from scrun_py.base.errors import AnchorStartupFailed, BundleError, ScrunError, rebuild
from scrun_py.base.invocation import Invocation
from scrun_py.base.logs import rfc3339_now
from scrun_py.base.records import NamedTuple
from scrun_py.base.signames import SIGHUP, SIGINT, SIGTERM
from scrun_py.container import rootdir, spool
from scrun_py.container.handle import Container
from scrun_py.container.record import validate_id
from scrun_py.site import audit, oci_settings, trust
from scrun_py.site.presence import site_file_may_apply

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from scrun_py.oci.bundle import Bundle
    from scrun_py.site import policy


class CreateArgs(NamedTuple):
    """create's command line (and run's): the container and the files it names."""

    container_id: str
    bundle: str | None = None  # --bundle (default: the working directory)
    pid_file: str | None = None
    console_socket: str | None = None


class SiteRules(NamedTuple):
    """What the site file (scrun-py.toml) asks of a create; without one, the defaults."""

    audit_settings: audit.AuditSettings
    site_policy: policy.Policy | None = None
    site_trust: trust.Trust = trust.Trust()
    site_dir: str = ""  # where scrun.lua is looked for ("": next to slurm.conf)
    staging: dict[str, Any] = {}  # noqa: RUF012 - [staging], checked; read only


def run(inv: Invocation, args: CreateArgs, early: EarlyAnchor | None = None) -> AnchorProcess:
    """Create the container; return the anchor process handle (used by `run`).

    `early` is an anchor forked before this call (fast_path.run), waiting for its spec;
    the caller ends it if create fails before handing it one.
    """
    validate_id(args.container_id)
    container_id, bundle = args.container_id, args.bundle
    # without a site file in either place there is no audit trail and no policy, and the
    # trust rule is the default one: the modules that read them are not even imported
    site = None
    settings = audit.AuditSettings()
    if site_file_may_apply(inv.slurm_conf_file()):
        from scrun_py.site import site_conf

        site = site_conf.load(inv.slurm_conf_file())
        settings = audit.load_settings(inv.slurm_conf_file(), site)
    try:
        rules = SiteRules(settings)
        if site is not None:
            from scrun_py.site import policy, staging_conf

            site_policy = policy.load_policy(site)  # a broken policy is audited as a failure
            site_trust = trust.parse(site)
            trust.check_lua_override(site_trust, os.environ, site)
            rules = SiteRules(settings, site_policy, site_trust, str(site.directory),
                              staging_conf.settings(site))
        anchor, applied = _create(inv, args, rules, early)
    except ScrunError as exc:
        audit.record(settings, "create-failed", container_id=container_id,
                     engine=audit.detect_engine(), bundle=bundle, error=str(exc))
        raise
    job_id = None
    try:
        job_id = Container(inv.root_dir, container_id).record().job_id
    except ScrunError:
        pass
    audit.record(settings, "create", container_id=container_id, engine=audit.detect_engine(),
                 job_id=job_id, bundle=os.path.abspath(bundle) if bundle else os.getcwd(),
                 policy=applied or None)
    return anchor


def _create(inv: Invocation, args: CreateArgs, rules: SiteRules,
            early: EarlyAnchor | None) -> tuple[AnchorProcess, list[str]]:
    """Read the bundle, enforce the policy, make the container's directory and start the
    anchor; the anchor once it reports the container created, and what the policy
    rewrote.  A failure after the directory exists removes it."""
    from scrun_py.oci.bundle import load_bundle

    loaded = load_bundle(os.path.abspath(args.bundle) if args.bundle else os.getcwd())
    _check_command(loaded)
    applied: list[str] = []
    if rules.site_policy is not None and not rules.site_policy.empty:
        applied = _apply_policy(inv, args.container_id, loaded, rules.site_policy)
    spec = _anchor_spec(inv, args, loaded, rules)
    spool.ensure_root(inv.root_dir)
    cdir = spool.make_container_dir(inv.root_dir, args.container_id)
    started = _start_anchor(inv, spec, early, cdir)
    # TERM, INT and HUP to create go on to the anchor (which withdraws the job)
    signames.Relay((SIGTERM, SIGINT, SIGHUP), started.process)
    _await_created(started, cdir)
    return started.process, applied


def _check_command(loaded: Bundle) -> None:
    """Refuse, before any job is asked for, a setting the node's runtime cannot apply in
    a job (oci/refused.py) and a process.args[0] that cannot run in the rootfs, in runc's
    words (engines map them to 127 and 126: oci/command.py)."""
    from scrun_py.oci.command import command_problem, mount_destinations
    from scrun_py.oci.refused import refused_setting

    process = loaded.config.process
    problem = refused_setting(loaded.raw) or command_problem(
        process.args, process.env, process.cwd, loaded.rootfs, mount_destinations(loaded.raw))
    if problem:
        raise BundleError(problem)


def _anchor_spec(inv: Invocation, args: CreateArgs, loaded: Bundle,
                 rules: SiteRules) -> AnchorSpec:
    """The anchor's spec, but its readiness pipe (ready_fd: _start_anchor's); checks the
    pid file's directory.  A console socket is dropped without a terminal, as runc does."""
    pid_path = os.path.abspath(args.pid_file) if args.pid_file else ""
    if pid_path and not os.path.isdir(os.path.dirname(pid_path)):
        raise ScrunError(f"pid file directory does not exist: {os.path.dirname(pid_path)}")
    if pid_path:  # a FIFO, device or directory another user put there: refused now
        from scrun_py.base import callerpath

        try:
            callerpath.check_writable(pid_path)
        except OSError as exc:
            raise ScrunError(f"pid file {pid_path}: {exc.strerror}") from None
    console_socket = args.console_socket if loaded.config.process.terminal else None
    settings = oci_settings.read_settings(inv.slurm_conf_file())
    runtime = RuntimeSettings(**{name: settings[name] for name in RuntimeSettings._fields})
    bundle_info = _bundle_info(inv, args.container_id, loaded, rules.site_trust)
    return AnchorSpec(
        container_id=args.container_id, root=inv.root_dir,
        orig_bundle=os.path.abspath(args.bundle) if args.bundle else "", pid_file=pid_path,
        console_socket=os.path.abspath(console_socket) if console_socket else "",
        log_path=inv.log_name or "", log_format=inv.log_format,
        debug=inv.debug, verbosity=inv.verbosity, log_level=inv.log_level,
        slurm_conf=inv.slurm_conf_file(),
        ready_fd=-1, created=rfc3339_now(), bundle_info=bundle_info.to_dict(),
        runtime=runtime._asdict(), audit_file=rules.audit_settings.file,
        audit_syslog=rules.audit_settings.syslog, engine=audit.detect_engine(),
        site_dir=rules.site_dir, lua_override=rules.site_trust.lua_override,
        staging=rules.staging)


def _start_anchor(inv: Invocation, spec: AnchorSpec, early: EarlyAnchor | None,
                  cdir: str) -> Started:
    """Hand `spec` to the anchor forked early (the click-free path), or start one now
    with a readiness pipe of its own; AnchorStartupFailed (`cdir` removed) when neither
    works."""
    if early is not None:
        try:
            return early.send(spec._replace(ready_fd=early.ready_fd))
        except OSError as exc:
            early.abandon()
            rootdir.remove_tree(cdir)
            raise _startup_failed(exc) from exc
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        anchor = launch.start_late(inv, spec._replace(ready_fd=write_fd), read_fd)
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        rootdir.remove_tree(cdir)
        raise _startup_failed(exc) from exc
    os.close(write_fd)
    return Started(anchor, read_fd)


def _startup_failed(exc: OSError) -> AnchorStartupFailed:
    return AnchorStartupFailed(f"cannot start the container anchor: {exc.strerror}")


def _await_created(started: Started, cdir: str) -> None:
    """Wait for the anchor's report; on a failure, for its end, then raise the error it
    reported (`cdir` removed)."""
    try:
        result = readiness.read_result(started.ready_read, None)
    finally:
        os.close(started.ready_read)
    if result is not None and result.get("ok"):
        return
    rc = started.process.wait()
    rootdir.remove_tree(cdir)
    if result is None:
        raise AnchorStartupFailed(f"container anchor exited during create (status {rc})")
    raise rebuild(str(result.get("kind", "ScrunError")),
                  str(result.get("message", "create failed")))


def _bundle_info(inv: Invocation, container_id: str, loaded: Bundle,
                 site_trust: trust.Trust) -> BundleInfo:
    """What the anchor gets of the bundle: config.json's process.env only as far as the
    trust rule lets it steer scrun-py and Slurm (each refused name is logged)."""
    from scrun_py.oci.bundle import program_in_rootfs
    from scrun_py.oci.resources import engine_request

    imported, refused = site_trust.split_env(loaded.config.process.env)
    for name in refused:
        inv.note("warning", trust.refused_warning(name), id=container_id, variable=name)
    process = loaded.config.process
    return BundleInfo(
        path=loaded.path, rootfs=loaded.rootfs, imported_env=imported,
        config=ConfigInfo(ociVersion=loaded.config.ociVersion,
                          process=ProcessInfo(args=program_in_rootfs(
                              list(process.args), process.env, loaded.rootfs, process.cwd),
                                              terminal=loaded.config.process.terminal),
                          annotations=dict(loaded.config.annotations)),
        engine_request=[list(r) for r in engine_request(loaded.raw)])


def _apply_policy(inv: Invocation, container_id: str, loaded: Bundle,
                  site_policy: policy.Policy) -> list[str]:
    """Enforce the site policy on config.json; return what was rewritten.

    Runs before the anchor exists: a refusal leaves nothing to clean up, and stage_in
    (and the node's runtime) only ever see the enforced config.json.
    """
    from scrun_py.oci.bundle import write_config
    from scrun_py.site import policy

    outcome = policy.enforce(site_policy, loaded.raw, bundle=loaded.path,
                             rootfs=loaded.rootfs, subject=policy_subject())
    if outcome.changes:
        write_config(loaded, outcome.config)
        if inv.log_name:
            from scrun_py.base.logs import append_line, format_record

            append_line(inv.log_name, format_record(
                "info", "site policy rewrote config.json", inv.log_format,
                {"id": container_id, "changes": outcome.changes}))
    return outcome.changes


def policy_subject() -> policy.Subject:
    """The real user behind this create (rootless podman runs us as its namespace's 0)."""
    import pwd

    from scrun_py.site import policy

    uid = procs.real_uid()
    try:
        pw = pwd.getpwuid(uid)
        return policy.Subject(uid=uid, user=pw.pw_name, home=pw.pw_dir)
    except KeyError:
        return policy.Subject(uid=uid, user=str(uid), home="/nonexistent")
