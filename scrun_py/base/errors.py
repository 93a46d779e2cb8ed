"""One exception hierarchy for everything scrun-py reports to its caller.

Messages are one lowercase line.  Where runc has a sentinel message that
containerd or podman match on, we use runc's exact words.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import ClassVar


class ScrunError(Exception):
    """Base class: ``str(err)`` is the one-line message shown to the user."""

    exit_code: ClassVar[int] = 1


class UsageError(ScrunError):
    """A command line that names a value scrun-py does not take (click's exit status)."""

    exit_code: ClassVar[int] = 2


class ContainerExists(ScrunError):
    def __init__(self) -> None:
        super().__init__("container with given ID already exists")


class InvalidContainerId(ScrunError):
    def __init__(self, reason: str = "") -> None:
        msg = "invalid container ID format"
        super().__init__(f"{msg}: {reason}" if reason else msg)


class ContainerNotFound(ScrunError):
    def __init__(self) -> None:
        super().__init__("container does not exist")


class ContainerNotRunning(ScrunError):
    def __init__(self) -> None:
        super().__init__("container not running")


class ContainerStillRunning(ScrunError):
    """`delete` without --force of a running container (runc's words when the id is known)."""

    def __init__(self, container_id: str = "") -> None:
        super().__init__(f"cannot delete container {container_id} that is not stopped: running"
                         if container_id else "container still running")


class CannotStart(ScrunError):
    """`start` of a container that is not created (runc's words for each state)."""

    STOPPED = "cannot start a container that has stopped"
    RUNNING = "cannot start an already running container"
    CREATING = "cannot start a container that is still being created"


class NotSupported(ScrunError):
    def __init__(self, verb: str) -> None:
        super().__init__(f"{verb} is not supported by scrun-py")


class ConfigError(ScrunError):
    """A configuration file or value is invalid."""


class OciConfError(ConfigError):
    pass


class BundleError(ConfigError):
    pass


class PolicyViolation(ScrunError):
    """The site security policy refuses this container."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"refused by site policy rule {rule}: {detail}")


class HookError(ScrunError):
    """scrun.lua failed to load or a hook failed."""


class AnchorError(ScrunError):
    pass


class AnchorUnreachable(AnchorError):
    pass


class AnchorStartupFailed(AnchorError):
    pass


class ProtocolError(AnchorError):
    pass


class PermissionDenied(AnchorError):
    pass


class SlurmError(ScrunError):
    """A Slurm client command failed or timed out."""


class AllocationFailed(SlurmError):
    pass


class StepLaunchFailed(SlurmError):
    pass


def _register(*classes: type[ScrunError]) -> dict[str, type[ScrunError]]:
    return {cls.__name__: cls for cls in classes}


def error_kind(err: BaseException) -> str:
    """Name used to carry an error across the control socket."""
    return type(err).__name__ if isinstance(err, ScrunError) else "ScrunError"


def rebuild(kind: str, message: str) -> ScrunError:
    """Turn a (kind, message) pair from the anchor back into the same class."""
    registry = _register(
        ScrunError, ContainerExists, InvalidContainerId, ContainerNotFound, CannotStart,
        ContainerNotRunning, ContainerStillRunning, NotSupported, ConfigError, OciConfError,
        BundleError, PolicyViolation, HookError, AnchorError,
        AnchorUnreachable, AnchorStartupFailed, ProtocolError, PermissionDenied,
        SlurmError, AllocationFailed, StepLaunchFailed,
    )
    cls = registry.get(kind, ScrunError)
    err = ScrunError.__new__(cls)
    Exception.__init__(err, message)
    return err
