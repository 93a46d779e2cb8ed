"""Entry point of the anchor process: `python -m scrun_py.anchor SPEC_JSON`.

The only place besides cli.main that exits: with the container's exit code.
"""

from __future__ import annotations

import asyncio
import os
import sys

from scrun_py.anchor import readiness
from scrun_py.anchor.spec import AnchorSpec


def _configure_logging(spec: AnchorSpec, environ: dict[str, str]) -> None:
    from pathlib import Path

    from scrun_py import logs

    levels = logs.env_levels(environ, debug=spec.debug, verbosity=spec.verbosity)
    logs.configure_structlog(logs.Sinks(
        stderr_level=levels["stderr"], file_level=levels["file"], syslog_level=levels["syslog"],
        log_path=Path(spec.log_path) if spec.log_path else None, log_format=spec.log_format))


async def _amain(spec: AnchorSpec) -> int:
    from pathlib import Path

    import structlog

    from scrun_py import logs, spool
    from scrun_py.anchor import signals
    from scrun_py.anchor.server import ControlServer
    from scrun_py.anchor.supervisor import Supervisor
    from scrun_py.errors import ScrunError, error_kind
    from scrun_py.hooks.lua import load_hooks
    from scrun_py.oci.bundle import load_bundle
    from scrun_py.oci_conf import find_oci_conf, load_oci_conf
    from scrun_py.slurm.cli_backend import CliSlurm
    from scrun_py.slurm.options import job_options

    environ = dict(os.environ)
    log = structlog.get_logger()
    structlog.contextvars.bind_contextvars(component="anchor", container_id=spec.container_id)
    root = Path(spec.root)
    cdir = spool.container_dir(root, spec.container_id)
    bundle = None
    try:
        bundle = load_bundle(spec.bundle)
        environ.update(bundle.imported_env())
        slurm_conf = Path(spec.slurm_conf)
        oci_conf = load_oci_conf(find_oci_conf(slurm_conf))
        levels = logs.env_levels(environ, debug=spec.debug, verbosity=spec.verbosity,
                                 overrides={"stderr": oci_conf.stdio_debug,
                                            "file": oci_conf.file_debug,
                                            "syslog": oci_conf.syslog_debug})
        logs.configure_structlog(logs.Sinks(
            stderr_level=levels["stderr"], file_level=levels["file"],
            syslog_level=levels["syslog"],
            log_path=Path(spec.log_path) if spec.log_path else None,
            log_format=spec.log_format))
        hooks = load_hooks(slurm_conf)
        timeout = environ.get("SCRUN_PY_ALLOC_TIMEOUT", "")
        try:
            alloc_timeout = float(timeout) if timeout else None
        except ValueError:
            raise ScrunError(f"SCRUN_PY_ALLOC_TIMEOUT: not a number: {timeout!r}") from None
        if alloc_timeout is not None and alloc_timeout <= 0:
            alloc_timeout = None
        if bundle.config.process.terminal and not spec.console_socket and not os.isatty(0):
            raise ScrunError("process.terminal is true but no --console-socket was given")
    except ScrunError as exc:
        log.info("create failed", error=str(exc))
        spool.remove_tree(cdir)
        readiness.write_failed(spec.ready_fd, error_kind(exc), str(exc))
        return 1
    env_for_job = dict(environ)
    sup = Supervisor(spec, bundle, oci_conf, hooks, CliSlurm(), env_for_job,
                     job_options(environ), alloc_timeout)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[int] = asyncio.Queue()
    signals.install(loop, queue)
    consumer = asyncio.create_task(signals.consume(queue, sup))
    try:
        listener = spool.bind(cdir)
    except OSError as exc:
        err = ScrunError(f"cannot listen on the control socket: {exc.strerror}")
        await sup.abort_create(err)
        readiness.write_failed(spec.ready_fd, error_kind(err), str(err))
        return 1
    server = ControlServer(sup, listener)
    await server.start()
    create = asyncio.create_task(sup.create())
    stop_wait = asyncio.create_task(sup._stop.wait())
    await asyncio.wait({create, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    failure: BaseException | None = None
    if not create.done():
        create.cancel()
        try:
            await create
        except (asyncio.CancelledError, Exception):
            pass
        failure = ScrunError("container creation interrupted")
    elif create.exception() is not None:
        failure = create.exception()
    stop_wait.cancel()
    if failure is not None:
        msg = str(failure) if isinstance(failure, ScrunError) else f"internal error: {failure!r}"
        if not isinstance(failure, ScrunError):
            log.error("create crashed", exc_info=failure)
        await sup.abort_create(failure)
        await server.close()
        readiness.write_failed(spec.ready_fd, error_kind(failure), msg)
        consumer.cancel()
        return 1
    readiness.write_ready(spec.ready_fd, os.getpid())
    os.close(spec.ready_fd)
    try:
        rc = await sup.run()
    except Exception:
        log.exception("anchor crashed")
        await sup.teardown(1)
        rc = 1
    await server.close()
    consumer.cancel()
    return rc


def main() -> None:
    spec = AnchorSpec.from_json(sys.argv[1])
    try:
        _configure_logging(spec, dict(os.environ))
        with open("/proc/self/comm", "w") as fh:
            fh.write(f"scrun:{spec.container_id}"[:15])
    except OSError:
        pass
    rc = asyncio.run(_amain(spec))
    sys.exit(rc)


if __name__ == "__main__":
    main()
