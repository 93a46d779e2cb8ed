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
import signal
from typing import NamedTuple


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


P, E, A = Phase, Event, Action


def _row(phase: Phase, **cells: tuple[Phase, Action]) -> dict[tuple[Phase, Event], Transition]:
    return {(phase, Event[name]): Transition(*cell) for name, cell in cells.items()}


TABLE: dict[tuple[Phase, Event], Transition] = {
    **_row(P.CREATING,
           CREATED_OK=(P.CREATED, A.READY),
           CREATE_FAILED=(P.STOPPING, A.CLEANUP_ABORTED),
           START=(P.CREATING, A.REFUSE_START_CREATING),
           KILL=(P.STOPPING, A.INTERRUPT_CREATE),
           KILL_HARMLESS=(P.CREATING, A.NONE),
           DELETE=(P.STOPPING, A.INTERRUPT_CREATE),
           DELETE_FORCE=(P.STOPPING, A.INTERRUPT_CREATE),
           ANCHOR_SIGNAL=(P.STOPPING, A.INTERRUPT_CREATE),
           JOB_ENDED=(P.STOPPING, A.INTERRUPT_CREATE),
           TIME_LIMIT=(P.STOPPING, A.INTERRUPT_CREATE)),
    **_row(P.CREATED,
           START=(P.STARTING, A.LAUNCH),
           KILL=(P.STOPPING, A.STOP),
           KILL_HARMLESS=(P.CREATED, A.NONE),
           DELETE=(P.STOPPING, A.STOP),
           DELETE_FORCE=(P.STOPPING, A.STOP),
           ANCHOR_SIGNAL=(P.STOPPING, A.STOP),
           JOB_ENDED=(P.STOPPING, A.STOP),
           TIME_LIMIT=(P.STOPPING, A.STOP)),
    **_row(P.STARTING,
           LAUNCHED=(P.RUNNING, A.WATCH_STEP),
           LAUNCH_FAILED=(P.STOPPING, A.STOP),
           START=(P.STARTING, A.AWAIT_LAUNCH),
           KILL=(P.STOPPING, A.NOTE_STOP),
           KILL_HARMLESS=(P.STARTING, A.NONE),
           DELETE=(P.STOPPING, A.NOTE_STOP),
           DELETE_FORCE=(P.STOPPING, A.NOTE_STOP),
           ANCHOR_SIGNAL=(P.STOPPING, A.NOTE_STOP),
           JOB_ENDED=(P.STARTING, A.NONE),  # srun fails or exits: STEP_EXITED tells
           TIME_LIMIT=(P.STOPPING, A.NOTE_STOP)),
    **_row(P.RUNNING,
           STEP_EXITED=(P.STOPPING, A.CLEANUP),
           START=(P.RUNNING, A.NONE),
           KILL=(P.RUNNING, A.SIGNAL),
           KILL_HARMLESS=(P.RUNNING, A.SIGNAL),
           DELETE=(P.RUNNING, A.REFUSE_DELETE_RUNNING),
           DELETE_FORCE=(P.STOPPING, A.KILL_STEP),
           ANCHOR_SIGNAL=(P.STOPPING, A.KILL_STEP),
           JOB_ENDED=(P.RUNNING, A.NONE),  # the step exits: STEP_EXITED tells
           TIME_LIMIT=(P.RUNNING, A.TERM_STEP)),
    **_row(P.STOPPING,
           CREATED_OK=(P.STOPPING, A.CLEANUP_ABORTED),  # create won the race with a stop
           CREATE_FAILED=(P.STOPPING, A.CLEANUP_ABORTED),
           LAUNCHED=(P.STOPPING, A.KILL_LAUNCHED),
           LAUNCH_FAILED=(P.STOPPING, A.CLEANUP),
           STEP_EXITED=(P.STOPPING, A.CLEANUP),
           START=(P.STOPPING, A.REFUSE_START_STOPPED),
           KILL=(P.STOPPING, A.SIGNAL),
           KILL_HARMLESS=(P.STOPPING, A.SIGNAL),
           DELETE=(P.STOPPING, A.NOTE_STOP),
           DELETE_FORCE=(P.STOPPING, A.NOTE_STOP),
           ANCHOR_SIGNAL=(P.STOPPING, A.SKIP_STAGE_OUT),
           JOB_ENDED=(P.STOPPING, A.NONE),
           TIME_LIMIT=(P.STOPPING, A.NONE),
           CLEANED=(P.STOPPED, A.FINISH)),
    **_row(P.STOPPED,
           START=(P.STOPPED, A.REFUSE_START_STOPPED),
           KILL=(P.STOPPED, A.REFUSE_NOT_RUNNING),
           KILL_HARMLESS=(P.STOPPED, A.REFUSE_NOT_RUNNING),
           DELETE=(P.STOPPED, A.NONE),
           DELETE_FORCE=(P.STOPPED, A.NONE),
           ANCHOR_SIGNAL=(P.STOPPED, A.NONE)),
}

# Signals whose default action ends a process: a created (not yet started) container
# receiving one is gone, as runc's init waiting on its exec fifo would be.  Every other
# signal (0, CHLD, CONT, URG, WINCH, and the stop signals) leaves it as it is.
FATAL_BY_DEFAULT = frozenset(int(s) for s in (
    signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGILL, signal.SIGTRAP,
    signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGKILL, signal.SIGUSR1,
    signal.SIGSEGV, signal.SIGUSR2, signal.SIGPIPE, signal.SIGALRM, signal.SIGTERM,
    signal.SIGSTKFLT, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGVTALRM, signal.SIGPROF,
    signal.SIGIO, signal.SIGPWR, signal.SIGSYS,
    *range(signal.SIGRTMIN, signal.SIGRTMAX + 1)))


def kill_event(sig: int) -> Event:
    return Event.KILL if sig in FATAL_BY_DEFAULT else Event.KILL_HARMLESS

