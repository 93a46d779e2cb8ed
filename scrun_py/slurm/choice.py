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

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
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
    into every anchor that has pyslurm beside it (its cost: base/lean.py)."""
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

    if mode == "auto" and client is not None:
        skipped = _built_for_other_commands(client)
        if skipped is not None:
            return skipped
    try:
        api = pyslurm_api.load(slurm_conf)
    except pyslurm_api.Unavailable as exc:
        return _refuse(mode, str(exc))
    try:
        ctld = api.controller_version()
    except pyslurm_api.RpcFailed as exc:
        return _without_controller(mode, api, exc, client)
    release = pyslurm_api.release_of(ctld)
    if release != api.release:
        return _refuse(mode, f"pyslurm {api.version} is built for Slurm "
                             f"{_dotted(api.release)}, slurmctld runs {ctld or '?'}")
    return Choice("pyslurm", f"{_label(mode)}: pyslurm {api.version} matches slurmctld {ctld}",
                  api, release)


def _label(mode: str) -> str:
    """How a reason names the mode: `auto`, or the setting that asked for pyslurm."""
    return "auto" if mode == "auto" else f"{BACKEND_ENV}=pyslurm"


def _dotted(release: tuple[int, int]) -> str:
    return f"{release[0]}.{release[1]:02d}"


def _refuse(mode: str, why: str) -> Choice:
    """pyslurm cannot be used: the CLI for `auto`, ConfigError for `pyslurm`."""
    if mode == "pyslurm":
        raise ConfigError(f"{_label(mode)}: {why}")
    return Choice("cli", f"{_label(mode)}: {why}")


def _built_for_other_commands(client: Callable[[], tuple[int, int] | None]) -> Choice | None:
    """`auto`'s CLI choice, without importing pyslurm, when the installed pyslurm was
    built for another release than the client commands'; None when it was not (or
    either release is unknown)."""
    built = installed_release()
    if built is None:
        return None
    commands = client()
    if commands is None or commands == built:
        return None
    return Choice("cli", f"auto: pyslurm is built for Slurm {_dotted(built)}, "
                         f"the client commands are {_dotted(commands)}", None, commands)


def _without_controller(mode: str, api: PyslurmApi, exc: Exception,
                        client: Callable[[], tuple[int, int] | None] | None) -> Choice:
    """slurmctld did not answer pyslurm: `auto` chooses the CLI.  For `pyslurm` a
    slurmctld that is down is not pyslurm's failure (used as asked, as the CLI would be);
    a slurmctld of another release does not answer pyslurm either: the client commands
    tell the two apart."""
    why = f"pyslurm {api.version} cannot ask slurmctld its version ({exc})"
    if mode == "auto":
        return _refuse(mode, why)
    commands = client() if client is not None else None
    if commands is not None and commands != api.release:
        return _refuse(mode, f"pyslurm {api.version} is built for Slurm "
                             f"{_dotted(api.release)}, the client commands are "
                             f"{_dotted(commands)} ({exc})")
    return Choice("pyslurm", f"{_label(mode)}: {why}; used as asked", api, commands)


class CliOptions(NamedTuple):
    """What the client commands need from oci.conf."""

    srun_path: str = "srun"
    srun_args: tuple[str, ...] = ()
    runtime_kill: str | None = None
    #: the directory (the caller's --root) where srun's release is remembered per binary
    #: (slurm/release_memo.py); None: srun is asked every time
    memo_dir: str | None = None

    def backend(self, version_probe: Callable[[], tuple[int, int] | None] | None = None,
                ) -> cli_backend.CliSlurm:
        """The CLI backend; `version_probe` asks the Slurm release before srun does."""
        return cli_backend.CliSlurm(srun_path=self.srun_path, srun_args=self.srun_args,
                                    runtime_kill=self.runtime_kill,
                                    version_probe=version_probe,
                                    memo_dir=self.memo_dir)

    def client_release(self) -> tuple[int, int] | None:
        """The release of the client commands (`srun --version`)."""
        return cli_backend.client_release(self.srun_path, self.memo_dir)


class Decision:
    """A choice the pyslurm backend waits for: made already (`made`), or `auto`'s, made
    in a thread (`start`) while the job is allocated.  `api()` and `release()` wait for
    it (up to CHOICE_WAIT_S; None then)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.choice: Choice | None = None

    @classmethod
    def made(cls, choice: Choice) -> Decision:
        decision = cls()
        decision._set(choice)
        return decision

    def _set(self, choice: Choice) -> None:
        self.choice = choice
        self._done.set()

    def start(self, slurm_conf: str | None,
              client: Callable[[], tuple[int, int] | None] | None,
              on_choice: Callable[[Choice], None]) -> None:
        """Choose for `auto` in a thread of its own; `on_choice` hears the choice."""
        def work() -> None:
            try:
                choice = choose("auto", slurm_conf, client)
            except Exception as exc:  # never the anchor's end: the CLI then
                choice = Choice("cli", f"auto: choosing failed: {type(exc).__name__}: {exc}")
            self._set(choice)
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
    for and cannot be used.  The choice and its reason are logged (info); `auto`'s once
    it is made, in its thread."""
    def note(choice: Choice) -> None:
        log.info("slurm backend chosen", backend=choice.name, reason=choice.reason)

    if mode == "auto" and not pyslurm_installed():
        note(Choice("cli", "auto: pyslurm is not installed"))
        return cli_options.backend()
    if mode == "cli":
        note(Choice("cli", f"{BACKEND_ENV}=cli"))
        return cli_options.backend()
    from scrun_py.slurm.pyslurm_backend import PyslurmSlurm

    if mode == "pyslurm":
        chosen = choose(mode, slurm_conf, cli_options.client_release)
        note(chosen)
        decision = Decision.made(chosen)
    else:
        decision = Decision()
    backend = PyslurmSlurm(cli_options.backend(decision.release), decision.api, log.warning)
    if mode == "auto":
        decision.start(slurm_conf, cli_options.client_release, note)
    return backend
