"""What a hook call sees (HookContext), and the logger a hook logs to where its caller
gave none: shared by interface.py, which chooses the hooks, and lua.py, which runs
scrun.lua's."""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any


class HookContext:
    """What a hook call sees; ``set_bundle_path``/``set_root_path`` change it in place."""

    def __init__(self, container_id: str, bundle: str, orig_bundle: str, root_path: str,
                 orig_root_path: str, spool_dir: str, config_file: str, job_id: int,
                 user_id: int, group_id: int, env: dict[str, str],
                 remote_argv: Callable[[str], list[str]]) -> None:
        self.container_id = container_id
        self.bundle = bundle
        self.orig_bundle = orig_bundle
        self.root_path = root_path
        self.orig_root_path = orig_root_path
        self.spool_dir = spool_dir
        self.config_file = config_file
        self.job_id = job_id
        self.user_id = user_id
        self.group_id = group_id
        self.env = env
        self.remote_argv = remote_argv


def structlog_logger() -> Any:
    """The anchor's logger where a caller gave none."""
    import structlog

    return structlog.get_logger()
