"""OCI pattern expansion: the ``%`` tokens of oci.conf's RunTime* and path keys.

Pure string work only: no I/O, no shell, no knowledge of oci.conf itself.
Token meanings follow Slurm's oci.conf(5) "OCI Pattern" section.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Every token slurmstepd expands; any other ``%x`` makes it fatal.
KNOWN_TOKENS: frozenset[str] = frozenset(
    {"%%", "%@", "%b", "%e", "%j", "%m", "%n", "%p", "%r", "%s", "%t", "%u", "%U", "%Z"}
)

#: ``%p`` when there is no task (step cleanup): Slurm prints NO_VAL as unsigned.
NO_TASK_PID = 4294967295
#: ``%t`` when there is no task (step cleanup).
NO_TASK_ID = -1


@dataclass(frozen=True, kw_only=True)
class PatternValues:
    """The value behind every token; ``%%`` needs none."""

    args: tuple[str, ...] = ()  # %@ task argv (empty when config.json carries it)
    bundle: str = ""  # %b bundle path (the task spool dir once config.json is rewritten)
    env_file: str = ""  # %e <task spool dir>/environment
    job_id: int  # %j
    spool_dir: str = ""  # %m step spool dir
    node_name: str  # %n
    pid: int = NO_TASK_PID  # %p PID of the task's first process
    rootfs: str = ""  # %r absolute root.path
    step_id: int  # %s
    task_id: int = NO_TASK_ID  # %t local task id
    user: str  # %u user name
    uid: int  # %U numeric uid
    workdir: str = ""  # %Z the step's original working directory


def quote_argv(args: Iterable[str]) -> str:
    """Render argv for ``%@``: each word single-quoted, ``'`` as ``'"'"'``, space separated."""
    return " ".join("'" + arg.replace("'", "'\"'\"'") + "'" for arg in args)


def _scan(pattern: str) -> list[tuple[int, str]]:
    """Return ``(index, token)`` for every ``%`` token; a trailing lone ``%`` is ``"%"``."""
    found: list[tuple[int, str]] = []
    i = pattern.find("%")
    while i != -1:
        token = pattern[i : i + 2]
        found.append((i, token))
        i = pattern.find("%", i + len(token))
    return found


def tokens_in(pattern: str) -> list[str]:
    """Every distinct token in ``pattern``, in order of first use (``%%`` included)."""
    return list(dict.fromkeys(token for _, token in _scan(pattern)))


def unknown_tokens(pattern: str) -> list[str]:
    """Tokens in ``pattern`` that slurmstepd would not expand, in order, without repeats."""
    return [token for token in tokens_in(pattern) if token not in KNOWN_TOKENS]


def expand_pattern(pattern: str, values: PatternValues) -> str:
    """Replace every token in ``pattern``; raise ``ValueError`` naming an unknown token."""
    table = {
        "%%": "%",
        "%@": quote_argv(values.args),
        "%b": values.bundle,
        "%e": values.env_file,
        "%j": str(values.job_id),
        "%m": values.spool_dir,
        "%n": values.node_name,
        "%p": str(values.pid),
        "%r": values.rootfs,
        "%s": str(values.step_id),
        "%t": str(values.task_id),
        "%u": values.user,
        "%U": str(values.uid),
        "%Z": values.workdir,
    }
    out: list[str] = []
    last = 0
    for i, token in _scan(pattern):
        if token not in table:
            if token == "%":
                raise ValueError("pattern ends with a lone '%'")
            raise ValueError(f"unknown pattern token '{token}'")
        out.append(pattern[last:i])
        out.append(table[token])
        last = i + 2
    out.append(pattern[last:])
    return "".join(out)
