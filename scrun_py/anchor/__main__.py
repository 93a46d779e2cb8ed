"""The anchor process: `run_anchor(spec)` in the child `create` forks, or
`python -m scrun_py.anchor --spec-fd FD` (rootless podman: behind `unshare`), which
reads its spec (AnchorSpec JSON) from the inherited pipe FD up to EOF.

The only place besides click_app.main that exits: with the container's exit code.
"""

from __future__ import annotations

import os
import sys

from scrun_py.anchor import readiness
from scrun_py.anchor.handoff import AnchorSpec, BundleInfo, read_spec

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.anchor.lifecycle import Lifecycle
    from scrun_py.anchor.nsholder import NsHolder
    from scrun_py.base.logs import Logger


def _logger(spec: AnchorSpec, environ: dict[str, str],
            overrides: dict[str, str | None] | None = None) -> Logger:
    """The anchor's logger; ConfigError for a bad level word."""
    from scrun_py.base import logs

    levels = logs.env_levels(environ, debug=spec.debug, verbosity=spec.verbosity,
                             log_level=spec.log_level, overrides=overrides)
    sinks = logs.Sinks(
        stderr_level=levels["stderr"], file_level=levels["file"], syslog_level=levels["syslog"],
        log_path=spec.log_path or None, log_format=spec.log_format)
    return logs.Logger(sinks, {"component": "anchor", "container_id": spec.container_id})


def _prepare(spec: AnchorSpec, log: Logger) -> Lifecycle:
    """Everything that can fail before anything exists in Slurm (raises ScrunError).
    Moves `log` to the levels oci.conf and the bundle's environment ask for."""
    from scrun_py.anchor.handoff import RuntimeSettings
    from scrun_py.anchor.lifecycle import Lifecycle
    from scrun_py.anchor.supervised import SupervisedContainer
    from scrun_py.base.errors import ScrunError
    from scrun_py.hooks.interface import load_hooks
    from scrun_py.slurm import choice
    from scrun_py.slurm.options import ANNOTATION_OPTIONS, ignored_warning, job_options

    environ = dict(os.environ)
    # salloc (and through the job's environment, srun) reads the slurm.conf create chose
    # (base/conf_lookup.py), the configless copy or a prefix's default included, as
    # Slurm's scrun sets SLURM_CONF to the file it read (read_config.c slurm_conf_init)
    if spec.slurm_conf:
        environ["SLURM_CONF"] = spec.slurm_conf
    bundle = BundleInfo.from_dict(spec.bundle_info)
    environ.update(bundle.imported_env)
    for key, var in ANNOTATION_OPTIONS.items():
        if key in bundle.config.annotations and var not in environ:
            environ[var] = bundle.config.annotations[key]
    environ = _with_engine_request(environ, bundle, log)
    slurm_conf = spec.slurm_conf
    oci_conf = RuntimeSettings(**spec.runtime)
    log.sinks.update(_logger(spec, environ, {"stderr": oci_conf.stdio_debug,
                                             "file": oci_conf.file_debug,
                                             "syslog": oci_conf.syslog_debug}).sinks)
    hooks = load_hooks(slurm_conf, override=None if spec.lua_override else "", log=log,
                       site_dir=spec.site_dir or None, staging=spec.staging)
    timeout = environ.get("SCRUN_PY_ALLOC_TIMEOUT", "")
    try:
        alloc_timeout = float(timeout) if timeout else None
    except ValueError:
        raise ScrunError(f"SCRUN_PY_ALLOC_TIMEOUT: not a number: {timeout!r}") from None
    if alloc_timeout is not None and alloc_timeout <= 0:
        alloc_timeout = None
    if bundle.config.process.terminal and not spec.console_socket and not os.isatty(0):
        raise ScrunError("process.terminal is true but no --console-socket was given")
    backend = choice.backend_for(choice.mode_of(environ), str(slurm_conf), choice.CliOptions(
        srun_path=oci_conf.srun_path, srun_args=tuple(oci_conf.srun_args),
        # IgnoreFileConfigJson: the runtime does not know the container by our bundle
        runtime_kill=None if oci_conf.ignore_file_config_json else oci_conf.runtime_kill,
        memo_dir=spec.root),
        log)
    job_opts = job_options(environ, spec.container_id)
    for name in job_opts.ignored:
        log.warning(ignored_warning(name), variable=name)
    return Lifecycle(SupervisedContainer(spec, bundle, hooks, environ, log), backend, job_opts,
                     alloc_timeout)


def _with_engine_request(environ: dict[str, str], bundle: BundleInfo,
                         log: Logger) -> dict[str, str]:
    """`environ` with what the engine's flags ask of the job (oci/resources.py), where no
    explicit SCRUN_* variable says otherwise (each one that does is logged)."""
    from scrun_py.oci.resources import Requested, apply_engine_request, override_message

    request = [Requested(*r) for r in bundle.engine_request]
    environ, overrides = apply_engine_request(environ, request)
    for o in overrides:
        log.info(override_message(o), variable=o.explicit)
    for req in request:
        if req not in [o.requested for o in overrides]:
            log.info(f"the job is asked for {req.var}={req.value} by the engine's {req.source}",
                     variable=req.var)
    return environ


def _run(spec: AnchorSpec, log: Logger, holder: NsHolder | str = "") -> int:
    from scrun_py.anchor import signals
    from scrun_py.anchor.server import ControlServer
    from scrun_py.base.errors import ScrunError, error_kind
    from scrun_py.container import rootdir, spool

    cdir = spool.container_dir(spec.root, spec.container_id)
    try:
        lc = _prepare(spec, log)
    except ScrunError as exc:
        log.info("create failed", error=str(exc))
        rootdir.remove_tree(cdir)
        readiness.write_failed(spec.ready_fd, error_kind(exc), str(exc))
        return 1
    signals.install(lc)
    _tie_holder(lc, holder)
    failure: BaseException | None = None
    server: ControlServer | None = None
    try:
        server = ControlServer(lc, spool.bind(cdir), log)
        server.start()
    except OSError as exc:
        failure = ScrunError(f"cannot listen on the control socket: {exc.strerror}")
        rootdir.remove_tree(cdir)
    if failure is None:
        failure = lc.create()
    if failure is not None:
        msg = str(failure) if isinstance(failure, ScrunError) else f"internal error: {failure!r}"
        if not isinstance(failure, ScrunError):
            log.error("create crashed", exc_info=failure)
        if server is not None:
            server.close()
        readiness.write_failed(spec.ready_fd, error_kind(failure), msg)
        return 1
    readiness.write_ready(spec.ready_fd, lc.container.pid)
    os.close(spec.ready_fd)
    rc = lc.wait_stopped()
    assert server is not None
    server.close()
    return rc


def _tie_holder(lc: Lifecycle, holder: NsHolder | str) -> None:
    """Make the namespace holder the container's pid (anchor/nsholder.py): the record
    and the pid file name it, a signal it relays is `kill`'s, its death stops the
    container as a SIGKILL.  Without one (`holder` says why, "" when none was tried)
    the anchor is the pid, as before, and a warning record says so (none when
    nothing was tried: `holder` is "")."""
    from scrun_py.anchor import signals

    if isinstance(holder, str) or not holder.settle():
        problem = holder if isinstance(holder, str) else holder.problem
        if problem:
            lc.container.log.warning(
                "the container's pid is the anchor's, in the login node's namespaces: "
                f"cannot make namespaces of its own: {problem}",
                container_id=lc.container.record.id)
        return
    lc.container.set_pid(holder.pid)
    holder.watch(lambda sig: signals.relay_to_container(lc, sig),
                 lambda: signals.pid_killed(lc))


def preload() -> None:
    """Import what the anchor runs on (a forked anchor does this while create still
    validates)."""
    import scrun_py.anchor.lifecycle
    import scrun_py.anchor.server
    import scrun_py.anchor.signals
    import scrun_py.anchor.supervised
    import scrun_py.hooks.lua
    import scrun_py.slurm.choice
    import scrun_py.slurm.cli_backend
    import scrun_py.slurm.options  # noqa: F401


def run_anchor(spec: AnchorSpec, holder: NsHolder | str = "") -> int:
    """Run the container's anchor until it has stopped; its exit code.  `holder`: the
    container's pid (anchor/nsholder.py), or why there is none."""
    from scrun_py.base import logs, procs
    from scrun_py.base.errors import ScrunError

    preload()
    try:
        log = _logger(spec, dict(os.environ))
    except ScrunError:  # a bad level word: _prepare reports it
        log = logs.Logger(logs.Sinks(stderr_level=logs.LEVELS["error"],
                                     file_level=logs.LEVELS["error"],
                                     syslog_level=logs.LEVELS["quiet"],
                                     log_path=spec.log_path or None,
                                     log_format=spec.log_format),
                          {"component": "anchor", "container_id": spec.container_id})
    procs.set_comm(f"scrun:{spec.container_id}")
    return _run(spec, log, holder)


def main() -> None:
    args = sys.argv[1:]
    if len(args) != 2 or args[0] != "--spec-fd" or not args[1].isdigit():
        sys.stderr.write("usage: python -m scrun_py.anchor --spec-fd FD\n")
        raise SystemExit(2)
    data = read_spec(int(args[1]))
    if not data:
        # create closed the pipe without a spec (it failed or died): nothing to run
        raise SystemExit(0)
    spec = AnchorSpec.from_json(data.decode())
    # inherited through pass_fds, so inheritable: no child of ours (salloc is spawned
    # without closing other descriptors) may keep create's readiness pipe open
    os.set_inheritable(spec.ready_fd, False)
    from scrun_py.anchor import nsholder

    holder = nsholder.start(spec.ready_fd)  # before the anchor's imports: launch._child
    rc = 1
    try:
        rc = run_anchor(spec, holder)
    finally:
        # the engine waits for the holder's exit: skip the interpreter's teardown (every
        # log write is unbuffered; flush what print-style output there may be)
        sys.stdout.flush()
        sys.stderr.flush()
        if not isinstance(holder, str):
            holder.release(rc)
        os._exit(rc)


if __name__ == "__main__":
    main()
