"""What a hook call sees (HookContext), and the logger a hook logs to where its caller
gave none: shared by interface.py, which chooses the hooks, and lua.py, which runs
scrun.lua's."""

from __future__ import annotations

from collections.abc import Callable

from scrun_py.base.records import NamedTuple

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any


class HookPaths(NamedTuple):
    """A container's files as its hooks first see them."""

    bundle: str
    orig_bundle: str  # create's --bundle ("" without one)
    root_path: str
    orig_root_path: str
    spool_dir: str
    config_file: str


class HookJob(NamedTuple):
    """The job a hook call runs for."""

    job_id: int
    user_id: int
    group_id: int
    env: dict[str, str]  # the job environment
    remote_argv: Callable[[str], list[str]]  # a command on every node of the job


class HookContext:
    """What a hook call sees; ``set_bundle_path``/``set_root_path`` change it in place."""

    def __init__(self, container_id: str, paths: HookPaths, job: HookJob) -> None:
        self.container_id = container_id
        self.bundle = paths.bundle
        self.orig_bundle = paths.orig_bundle
        self.root_path = paths.root_path
        self.orig_root_path = paths.orig_root_path
        self.spool_dir = paths.spool_dir
        self.config_file = paths.config_file
        self.job_id = job.job_id
        self.user_id = job.user_id
        self.group_id = job.group_id
        self.env = job.env
        self.remote_argv = job.remote_argv


def structlog_logger() -> Any:
    """The anchor's logger where a caller gave none."""
    import structlog

    return structlog.get_logger()
