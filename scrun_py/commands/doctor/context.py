"""What the checks of one `doctor` run share: the invocation, the slurm.conf in use (how
it was found, and why it cannot be used), the Slurm client commands missing from PATH,
what earlier checks found (the Slurm release, oci.conf's runtime, the scrun.lua in use),
and the commands the checks run.

Those commands (srun, scontrol, munge, unshare, docker) start together when `doctor`
starts, each in a thread of its own (`Probe`), and share one deadline (PROBE_TIMEOUT_S):
when nothing answers, `doctor` still ends after about that long, and says which command
did not answer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from scrun_py.base.conf_lookup import Choice
from scrun_py.base.invocation import Invocation
from scrun_py.commands.doctor.report import SKIP, Check

T = TypeVar("T")

#: how long the commands of all the checks may take together (they run at once)
PROBE_TIMEOUT_S = 4.0
#: the problem of a run that found no slurm.conf (the slurm.conf check says where it looked)
NOT_FOUND = "no slurm.conf found"


def run_command(argv: list[str], timeout_s: float = PROBE_TIMEOUT_S,
                stdin: bytes | None = None,
                env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit code, output) of a check command; its failure to run is in the output."""
    from scrun_py.base import procs

    res = procs.run(argv, env=env, timeout_s=timeout_s, stdin=stdin)
    if res.error:
        return res.status, f"{argv[0]}: not found"
    if res.timed_out:
        return res.status, f"{' '.join(argv[:2])}: no answer within {timeout_s:.1f}s"
    return res.status, res.text.strip()


def resolve_program(name: str) -> str | None:
    """The program scrun-py would run for `name` (procs.resolve_program: absolute PATH
    entries only), None when there is none: shutil.which would also find one through an
    empty or relative PATH entry, which scrun-py never uses."""
    from scrun_py.base import procs

    try:
        return procs.resolve_program(name, os.environ)
    except OSError:
        return None


def remaining(deadline: float) -> float:
    """The time left before `deadline` (time.monotonic), at least 0.1 s."""
    import time

    return max(0.1, deadline - time.monotonic())


class Probe:
    """The commands of one check, run in a thread from the start of `doctor`."""

    def __init__(self, work: Callable[[], tuple[int, str]]) -> None:
        import threading

        self._result: tuple[int, str] | None = None

        def target() -> None:
            try:
                self._result = work()
            except Exception as exc:  # a check must never crash the report
                self._result = (1, f"check crashed: {exc!r}")

        # a daemon: one that outlives its deadline (procs.run kills the command) does
        # not hold the report back
        self._thread = threading.Thread(target=target, name="doctor-probe", daemon=True)
        self._thread.start()

    def result(self, deadline: float, what: str) -> tuple[int, str]:
        """What the commands answered, or `what: no answer` once the deadline (and a
        second more, for procs.run to kill a late command) has passed."""
        import time

        self._thread.join(max(0.0, deadline + 1.0 - time.monotonic()))
        if self._result is None:
            from scrun_py.base import procs

            return procs.TIMEOUT_STATUS, f"{what}: no answer"
        return self._result


def slurm_conf_problem(path: Path) -> str:
    """Why slurm.conf cannot be used ('' if it can)."""
    if not path.exists():
        return f"{path}: not found"
    if not path.is_file():
        return f"{path}: not a regular file"
    if not os.access(path, os.R_OK):
        return f"{path}: not readable"
    return ""


@dataclass
class Context:
    """One run's shared state; `start` makes it and starts the commands."""

    inv: Invocation
    slurm_conf: Path
    env: dict[str, str]  # the environment of Slurm's commands: this one, with SLURM_CONF
    conf_problem: str  # why slurm.conf cannot be used ('' if it can)
    missing: list[str]  # Slurm client commands not on PATH
    timeout_s: float = PROBE_TIMEOUT_S
    deadline: float = 0.0
    probes: dict[str, Probe] = field(default_factory=dict)
    version: tuple[int, int] | None = None  # the Slurm release srun reported
    runtime_cmd: str | None = None  # the OCI runtime oci.conf runs
    oci_conf_ok: bool = False  # oci.conf was read and is valid
    unmunged: bool = False  # munge -n gave a credential (unmunge was asked)
    choice: Choice | None = None  # how slurm.conf was found (None: made by hand, tests)
    lua_script: str = ""  # the scrun.lua in use, once the scrun.lua check loaded it
    ctld_up: bool = False  # scontrol ping said UP (the slurmctld check)

    def command(self, argv: list[str], stdin: bytes | None = None,
                env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run a check command within what is left of the deadline."""
        return run_command(argv, timeout_s=remaining(self.deadline), stdin=stdin, env=env)

    def run_probe(self, argv: list[str], timeout_s: float) -> tuple[int, str]:
        """Run a command of Slurm's with a deadline of its own (the staging probe's
        step, which starts after the others have answered)."""
        return run_command(argv, timeout_s=timeout_s, env=self.env)

    def probe(self, name: str, what: str) -> tuple[int, str]:
        """What the command started as `name` answered (`what` names it if it did not)."""
        return self.probes[name].result(self.deadline, what)

    def needs_conf(self, name: str, why: str = "") -> Check:
        """A check skipped for want of slurm.conf."""
        return Check(name, SKIP, f"not checked: {why or 'needs slurm.conf'} "
                                 f"({self.conf_problem})")


def start(inv: Invocation, timeout_s: float = PROBE_TIMEOUT_S) -> Context:
    """The context of a run of `doctor` for `inv`, its commands started."""
    import time

    from scrun_py.slurm.argv import CLIENT_COMMANDS

    choice = inv.slurm_conf_choice()
    slurm_conf = Path(choice.path)
    ctx = Context(inv, slurm_conf, {**os.environ, "SLURM_CONF": str(slurm_conf)},
                  slurm_conf_problem(slurm_conf) if choice.found else NOT_FOUND,
                  [c for c in CLIENT_COMMANDS if resolve_program(c) is None], timeout_s,
                  choice=choice)
    ctx.deadline = time.monotonic() + timeout_s
    ctx.probes = {name: Probe(work) for name, work in probe_work(ctx).items()}
    return ctx


def probe_work(ctx: Context) -> dict[str, Callable[[], tuple[int, str]]]:
    """The commands to start, by name: munge, unshare and docker always; srun --version
    and scontrol ping only with a usable slurm.conf (they retry a missing one for 60 s),
    srun only when every client command is there."""
    from scrun_py.slurm.argv import build_ping_argv, build_version_argv

    def munge() -> tuple[int, str]:
        rc, cred = ctx.command(["munge", "-n"])
        if rc != 0:
            return rc, cred
        ctx.unmunged = True
        return ctx.command(["unmunge"], stdin=cred.encode())

    work: dict[str, Callable[[], tuple[int, str]]] = {
        "munge": munge,
        # unshare runs `true` by the absolute path it is given, never by a PATH search
        "unshare": lambda: ctx.command(["unshare", "--user", "--map-root-user",
                                        resolve_program("true") or "/bin/true"]),
        # the runtimes, then whether the daemon is rootless (engines.root_dockerd)
        "docker": lambda: ctx.command(["docker", "info", "--format",
                                       "{{json .Runtimes}}\n{{json .SecurityOptions}}"]),
    }
    if not ctx.conf_problem:
        if not ctx.missing:
            work["version"] = lambda: ctx.command(build_version_argv(), env=ctx.env)
        work["ping"] = lambda: ctx.command(build_ping_argv(), env=ctx.env)
    return work


def within(work: Callable[[], T], deadline: float) -> T:
    """`work()` (pyslurm's RPCs, in this process) before `deadline`; TimeoutError if it
    has not returned by then (its thread is left to itself, a daemon)."""
    import threading

    box: list[T | BaseException] = []

    def target() -> None:
        try:
            box.append(work())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, name="doctor-backend", daemon=True)
    thread.start()
    thread.join(remaining(deadline))
    if not box:
        raise TimeoutError
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]
