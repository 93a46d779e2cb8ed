"""OCI pattern tokens: the ``%`` tokens of oci.conf's RunTime* and path keys.

Pure string work only: no I/O, no shell, no knowledge of oci.conf itself.  Token
meanings follow Slurm's oci.conf(5) "OCI Pattern" section (docs/oci.conf.md); the
one pattern scrun-py expands itself, RunTimeKill, is expanded in slurm/argv.py.
"""

from __future__ import annotations

#: Every token slurmstepd expands; any other ``%x`` makes it fatal.
KNOWN_TOKENS: frozenset[str] = frozenset(
    {"%%", "%@", "%b", "%e", "%j", "%m", "%n", "%p", "%r", "%s", "%t", "%u", "%U", "%Z"}
)


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
