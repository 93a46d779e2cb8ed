"""Which Slurm backend an anchor uses, and why: the environment variable
SCRUN_PY_SLURM_BACKEND (read where the anchor starts, like every SCRUN_PY_* setting).

    cli       Slurm's client commands only
    pyslurm   Slurm's C API through pyslurm where it can (scrun_py/slurm/pyslurm_backend.py);
              a pyslurm that does not load, or was built for another release than
              slurmctld's, is an error
    auto      (the default) pyslurm when it imports and was built for the release
              slurmctld runs, the client commands otherwise

pyslurm is imported only when the choice may be pyslurm (lazily: no short command pays for
it).  `auto` decides in a thread of its own while the job is allocated, which uses the
client commands only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from scrun_py.base import threads
from scrun_py.base.errors import ConfigError
from scrun_py.base.records import NamedTuple
from scrun_py.slurm import cli_backend
from scrun_py.slurm.backend import SlurmBackend

TYPE_CHECKING = False
if TYPE_CHECKING:
    from scrun_py.base.logs import Logger
    from scrun_py.slurm.pyslurm_api import PyslurmApi

BACKEND_ENV = "SCRUN_PY_SLURM_BACKEND"
MODES = ("auto", "cli", "pyslurm")
CHOICE_WAIT_S = 60.0  # an import and one RPC; slurmctld may be slow to answer


class Choice(NamedTuple):
    name: str  # "cli" or "pyslurm"
    reason: str  # one line: what decided it
    api: PyslurmApi | None = None
    release: tuple[int, int] | None = None  # slurmctld's, when pyslurm asked it


def mode_of(environ: Mapping[str, str]) -> str:
    """The configured mode; ConfigError for a value that is not one."""
    value = environ.get(BACKEND_ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise ConfigError(f"{BACKEND_ENV}={environ.get(BACKEND_ENV)!r}: not one of "
                          f"{', '.join(MODES)}")
    return value


def pyslurm_installed() -> bool:
    """Whether pyslurm can be found, without importing it: asked of the import system's
    finders, as importlib.util.find_spec does for a top-level name (without importing
    importlib.util: every anchor asks, before salloc runs)."""
    import sys

    if "pyslurm" in sys.modules:
        return True
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            if find_spec("pyslurm", None) is not None:
                return True
        except (ImportError, ValueError):
            return False
    return False


def installed_release() -> tuple[int, int] | None:
    """The Slurm release the installed pyslurm was built for (pyslurm X.Y.* builds
    against Slurm X.Y only), without importing it: from the name of the metadata
    directory its installer wrote (`pyslurm-25.11.2.dist-info`), the first on sys.path
    as importlib.metadata finds it.  importlib.metadata itself imports ~100 modules
    (28 ms, 4 MB of every anchor that has pyslurm beside it)."""
    import os
    import sys

    from scrun_py.slurm import pyslurm_api

    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            lower = name.lower()
            if lower.startswith("pyslurm-") and lower.endswith((".dist-info", ".egg-info")):
                return pyslurm_api.release_of(name[len("pyslurm-"):].rpartition(".")[0])
    return None


def choose(mode: str, slurm_conf: str | None,
           client: Callable[[], tuple[int, int] | None] | None = None) -> Choice:
    """Decide (an import and one RPC for `auto` and `pyslurm`).  ConfigError when
    `pyslurm` was asked for and does not load or was built for another release than
    slurmctld's; `auto` then chooses the CLI, as it does while slurmctld does not answer.
    `client` gives the client commands' release: for `auto`, a pyslurm built for another
    one is not even imported (its libslurm would be loaded into the anchor for nothing);
    for `pyslurm`, it is asked only when slurmctld does not answer pyslurm, to refuse a
    pyslurm of another release."""
    if mode == "cli":
        return Choice("cli", f"{BACKEND_ENV}=cli")
    from scrun_py.slurm import pyslurm_api

    label = "auto" if mode == "auto" else f"{BACKEND_ENV}=pyslurm"
    built = installed_release() if mode == "auto" and client is not None else None
    if built is not None and client is not None:
        commands = client()
        if commands is not None and commands != built:
            return Choice("cli", f"auto: pyslurm is built for Slurm {built[0]}.{built[1]:02d}, "
                                 f"the client commands are {commands[0]}.{commands[1]:02d}",
                          None, commands)

    def refuse(why: str) -> Choice:
        if mode == "pyslurm":
            raise ConfigError(f"{label}: {why}")
        return Choice("cli", f"{label}: {why}")

    try:
        api = pyslurm_api.load(slurm_conf)
    except pyslurm_api.Unavailable as exc:
        return refuse(str(exc))
    try:
        ctld = api.controller_version()
    except pyslurm_api.RpcFailed as exc:
        why = f"pyslurm {api.version} cannot ask slurmctld its version ({exc})"
        if mode == "auto":
            return refuse(why)
        # slurmctld down is not pyslurm's failure (used as asked, as the CLI would be);
        # a slurmctld of another release does not answer pyslurm either: the client
        # commands tell the two apart
        commands = client() if client is not None else None
        if commands is not None and commands != api.release:
            return refuse(f"pyslurm {api.version} is built for Slurm "
                          f"{api.release[0]}.{api.release[1]:02d}, the client commands are "
                          f"{commands[0]}.{commands[1]:02d} ({exc})")
        return Choice("pyslurm", f"{label}: {why}; used as asked", api, commands)
    release = pyslurm_api.release_of(ctld)
    if release != api.release:
        return refuse(f"pyslurm {api.version} is built for Slurm "
                      f"{api.release[0]}.{api.release[1]:02d}, slurmctld runs {ctld or '?'}")
    return Choice("pyslurm", f"{label}: pyslurm {api.version} matches slurmctld {ctld}",
                  api, release)


class Deferred:
    """The `auto` choice, made in a thread (started by `start`) while the job is
    allocated; `api()` and `release()` wait for it."""

    def __init__(self, slurm_conf: str | None,
                 client: Callable[[], tuple[int, int] | None] | None = None) -> None:
        self._conf = slurm_conf
        self._client = client
        self._done = threading.Event()
        self.choice: Choice | None = None

    def start(self, on_choice: Callable[[Choice], None]) -> None:
        def work() -> None:
            try:
                choice = choose("auto", self._conf, self._client)
            except Exception as exc:  # never the anchor's end: the CLI then
                choice = Choice("cli", f"auto: choosing failed: {type(exc).__name__}: {exc}")
            self.choice = choice
            self._done.set()
            on_choice(choice)

        threads.spawn(work, "scrun-backend")

    def _wait(self) -> Choice | None:
        self._done.wait(CHOICE_WAIT_S)
        return self.choice

    def api(self) -> PyslurmApi | None:
        choice = self._wait()
        return choice.api if choice is not None else None

    def release(self) -> tuple[int, int] | None:
        choice = self._wait()
        return choice.release if choice is not None else None


def backend_for(mode: str, slurm_conf: str | None, cli_options: CliOptions,
                log: Logger) -> SlurmBackend:
    """The anchor's backend for `mode` (mode_of); ConfigError when `pyslurm` was asked
    for and cannot be used.  The choice and its reason are logged (info)."""
    def note(choice: Choice) -> None:
        log.info("slurm backend chosen", backend=choice.name, reason=choice.reason)

    def cli(probe: Callable[[], tuple[int, int] | None] | None = None) -> cli_backend.CliSlurm:
        return cli_backend.CliSlurm(
            srun_path=cli_options.srun_path, srun_args=cli_options.srun_args,
            runtime_kill=cli_options.runtime_kill, version_probe=probe)

    if mode == "auto" and not pyslurm_installed():
        note(Choice("cli", "auto: pyslurm is not installed"))
        return cli()
    if mode == "cli":
        note(Choice("cli", f"{BACKEND_ENV}=cli"))
        return cli()
    from scrun_py.slurm.pyslurm_backend import PyslurmSlurm

    if mode == "pyslurm":
        choice = choose(mode, slurm_conf,
                        lambda: cli_backend.client_release(cli_options.srun_path))
        note(choice)
        return PyslurmSlurm(cli(lambda: choice.release), lambda: choice.api, log.warning)
    deferred = Deferred(slurm_conf, lambda: cli_backend.client_release(cli_options.srun_path))
    backend = PyslurmSlurm(cli(deferred.release), deferred.api, log.warning)
    deferred.start(note)
    return backend


class CliOptions(NamedTuple):
    """What the client commands need from oci.conf."""

    srun_path: str = "srun"
    srun_args: tuple[str, ...] = ()
    runtime_kill: str | None = None
