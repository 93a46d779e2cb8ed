"""`kill [--all] [--regex] ID [SIGNAL]`: signal the container (through its job).

`--all` changes nothing (the table in flags.py says where the signal goes).
"""

from __future__ import annotations

from scrun_py import audit, client, spool, store
from scrun_py.errors import AnchorUnreachable, ContainerNotRunning, ScrunError
from scrun_py.settings import Invocation
from scrun_py.signames import parse_signal
from scrun_py.status import Status


def run(inv: Invocation, container_id: str, signal: str | None) -> None:
    sig = parse_signal(signal or "TERM")
    record = store.load(inv.root, container_id)
    if store.effective_status(record) is Status.STOPPED:
        raise ContainerNotRunning()
    try:
        client.request(inv.root, container_id, "kill", timeout_s=120, signal=sig)
    except AnchorUnreachable as exc:
        raise ContainerNotRunning() from exc
    audit.emit(inv.slurm_conf_path(), "kill", container_id=container_id,
               job_id=record.job_id or None, bundle=record.bundle, signal=sig)


def run_matching(inv: Invocation, pattern: str, signal: str | None) -> None:
    """crun's `kill --regex`: signal every container whose id matches; a container that
    fails is a warning on stderr, not a failure of the command."""
    parse_signal(signal or "TERM")
    for container_id in spool.matching_ids(inv.root, pattern):
        try:
            run(inv, container_id, signal)
        except ScrunError as exc:
            inv.note("warning", f"kill {container_id}: {exc}", container_id=container_id)
