"""The container lifecycle as one table: (phase, event) → (next phase, action).  Pure.

`anchor/lifecycle.py` is the only code that moves between phases, and only through
`TABLE`.  A pair missing from the table cannot happen (e.g. LAUNCHED while CREATED, or
TIME_LIMIT once stopped: the cleanup cancels the watches); the lifecycle logs it and
changes nothing.

Phases are finer than the OCI status in state.json: STARTING still reads `created`
(the step is being launched) and STOPPING keeps the status it had until the cleanup
has ended the job and writes `stopped`.
"""

from __future__ import annotations

import enum

from scrun_py.base import signames
from scrun_py.base.records import NamedTuple


class Phase(enum.Enum):
    CREATING = "creating"  # allocating the job, stage_in
    CREATED = "created"  # waiting for start
    STARTING = "starting"  # launching the container step
    RUNNING = "running"  # the step runs
    STOPPING = "stopping"  # killing the step, stage_out, ending the job
    STOPPED = "stopped"  # terminal


class Event(enum.Enum):
    CREATED_OK = "created-ok"  # allocation and stage_in done
    CREATE_FAILED = "create-failed"  # create raised or was interrupted
    START = "start"  # `start` request
    LAUNCHED = "launched"  # srun started
    LAUNCH_FAILED = "launch-failed"
    STEP_EXITED = "step-exited"  # srun exited (code = the container's exit code)
    JOB_ENDED = "job-ended"  # the allocation ended underneath us
    KILL = "kill"  # `kill` with a signal whose default action ends a process
    KILL_HARMLESS = "kill-harmless"  # `kill` with 0 or a default-ignored/stop signal
    DELETE = "delete"
    DELETE_FORCE = "delete-force"
    ANCHOR_SIGNAL = "anchor-signal"  # TERM/INT/HUP to the anchor itself
    TIME_LIMIT = "time-limit"  # the job's time limit is near
    CLEANED = "cleaned"  # the cleanup routine finished


class Action(enum.Enum):
    NONE = "none"
    READY = "ready"  # pid file, status created, report success to create
    LAUNCH = "launch"  # start the container step
    AWAIT_LAUNCH = "await-launch"  # a second start waits for the first
    WATCH_STEP = "watch-step"  # status running; wait for the step to exit
    SIGNAL = "signal"  # deliver a kill signal to the step, if it runs
    TERM_STEP = "term-step"  # TERM, grace, KILL (time limit)
    KILL_STEP = "kill-step"  # KILL, grace, scancel of the step
    KILL_LAUNCHED = "kill-launched"  # a step launched after a stop was asked: watch and kill
    NOTE_STOP = "note-stop"  # remember the exit code / delete; wait for the launch outcome
    STOP = "stop"  # no step: remember the exit code, then CLEANUP
    CLEANUP = "cleanup"  # stage_out, end the job, status stopped
    INTERRUPT_CREATE = "interrupt-create"  # cancel create; CREATE_FAILED follows
    CLEANUP_ABORTED = "cleanup-aborted"  # the same cleanup, removing every trace
    SKIP_STAGE_OUT = "skip-stage-out"  # a second anchor signal: just end the job
    FINISH = "finish"  # wake everyone waiting for the end
    REFUSE_START_CREATING = "refuse-start-creating"
    REFUSE_START_STOPPED = "refuse-start-stopped"
    REFUSE_DELETE_RUNNING = "refuse-delete-running"
    REFUSE_NOT_RUNNING = "refuse-not-running"


class Transition(NamedTuple):
    next: Phase
    action: Action


def _row(phase: Phase, **cells: tuple[Phase, Action]) -> dict[tuple[Phase, Event], Transition]:
    return {(phase, Event[name]): Transition(*cell) for name, cell in cells.items()}


TABLE: dict[tuple[Phase, Event], Transition] = {
    **_row(Phase.CREATING,
           CREATED_OK=(Phase.CREATED, Action.READY),
           CREATE_FAILED=(Phase.STOPPING, Action.CLEANUP_ABORTED),
           START=(Phase.CREATING, Action.REFUSE_START_CREATING),
           KILL=(Phase.STOPPING, Action.INTERRUPT_CREATE),
           KILL_HARMLESS=(Phase.CREATING, Action.NONE),
           DELETE=(Phase.STOPPING, Action.INTERRUPT_CREATE),
           DELETE_FORCE=(Phase.STOPPING, Action.INTERRUPT_CREATE),
           ANCHOR_SIGNAL=(Phase.STOPPING, Action.INTERRUPT_CREATE),
           JOB_ENDED=(Phase.STOPPING, Action.INTERRUPT_CREATE),
           TIME_LIMIT=(Phase.STOPPING, Action.INTERRUPT_CREATE)),
    **_row(Phase.CREATED,
           START=(Phase.STARTING, Action.LAUNCH),
           KILL=(Phase.STOPPING, Action.STOP),
           KILL_HARMLESS=(Phase.CREATED, Action.NONE),
           DELETE=(Phase.STOPPING, Action.STOP),
           DELETE_FORCE=(Phase.STOPPING, Action.STOP),
           ANCHOR_SIGNAL=(Phase.STOPPING, Action.STOP),
           JOB_ENDED=(Phase.STOPPING, Action.STOP),
           TIME_LIMIT=(Phase.STOPPING, Action.STOP)),
    **_row(Phase.STARTING,
           LAUNCHED=(Phase.RUNNING, Action.WATCH_STEP),
           LAUNCH_FAILED=(Phase.STOPPING, Action.STOP),
           START=(Phase.STARTING, Action.AWAIT_LAUNCH),
           KILL=(Phase.STOPPING, Action.NOTE_STOP),
           KILL_HARMLESS=(Phase.STARTING, Action.NONE),
           DELETE=(Phase.STOPPING, Action.NOTE_STOP),
           DELETE_FORCE=(Phase.STOPPING, Action.NOTE_STOP),
           ANCHOR_SIGNAL=(Phase.STOPPING, Action.NOTE_STOP),
           JOB_ENDED=(Phase.STARTING, Action.NONE),  # srun fails or exits: STEP_EXITED tells
           TIME_LIMIT=(Phase.STOPPING, Action.NOTE_STOP)),
    **_row(Phase.RUNNING,
           STEP_EXITED=(Phase.STOPPING, Action.CLEANUP),
           START=(Phase.RUNNING, Action.NONE),
           KILL=(Phase.RUNNING, Action.SIGNAL),
           KILL_HARMLESS=(Phase.RUNNING, Action.SIGNAL),
           DELETE=(Phase.RUNNING, Action.REFUSE_DELETE_RUNNING),
           DELETE_FORCE=(Phase.STOPPING, Action.KILL_STEP),
           ANCHOR_SIGNAL=(Phase.STOPPING, Action.KILL_STEP),
           JOB_ENDED=(Phase.RUNNING, Action.NONE),  # the step exits: STEP_EXITED tells
           TIME_LIMIT=(Phase.RUNNING, Action.TERM_STEP)),
    **_row(Phase.STOPPING,
           CREATED_OK=(Phase.STOPPING, Action.CLEANUP_ABORTED),  # create won the race with a stop
           CREATE_FAILED=(Phase.STOPPING, Action.CLEANUP_ABORTED),
           LAUNCHED=(Phase.STOPPING, Action.KILL_LAUNCHED),
           LAUNCH_FAILED=(Phase.STOPPING, Action.CLEANUP),
           STEP_EXITED=(Phase.STOPPING, Action.CLEANUP),
           START=(Phase.STOPPING, Action.REFUSE_START_STOPPED),
           KILL=(Phase.STOPPING, Action.SIGNAL),
           KILL_HARMLESS=(Phase.STOPPING, Action.SIGNAL),
           DELETE=(Phase.STOPPING, Action.NOTE_STOP),
           DELETE_FORCE=(Phase.STOPPING, Action.NOTE_STOP),
           ANCHOR_SIGNAL=(Phase.STOPPING, Action.SKIP_STAGE_OUT),
           JOB_ENDED=(Phase.STOPPING, Action.NONE),
           TIME_LIMIT=(Phase.STOPPING, Action.NONE),
           CLEANED=(Phase.STOPPED, Action.FINISH)),
    **_row(Phase.STOPPED,
           START=(Phase.STOPPED, Action.REFUSE_START_STOPPED),
           KILL=(Phase.STOPPED, Action.REFUSE_NOT_RUNNING),
           KILL_HARMLESS=(Phase.STOPPED, Action.REFUSE_NOT_RUNNING),
           DELETE=(Phase.STOPPED, Action.NONE),
           DELETE_FORCE=(Phase.STOPPED, Action.NONE),
           ANCHOR_SIGNAL=(Phase.STOPPED, Action.NONE)),
}

# Signals whose default action ends a process: a created (not yet started) container
# receiving one is gone, as runc's init waiting on its exec fifo would be.  Every other
# signal (0, CHLD, CONT, URG, WINCH, and the stop signals) leaves it as it is.
FATAL_BY_DEFAULT = frozenset((
    *(signames.number(f"SIG{name}") for name in (
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV",
        "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "XCPU", "XFSZ", "VTALRM", "PROF", "IO",
        "PWR", "SYS")),
    *range(signames.SIGRTMIN, signames.SIGRTMAX + 1)))


def kill_event(sig: int) -> Event:
    return Event.KILL if sig in FATAL_BY_DEFAULT else Event.KILL_HARMLESS

