"""doctor's probe of the shipped staging script (lua/scrun-staging.lua): whether the
compute nodes see its staging base (and its cache base) at the same path.

When the scrun.lua in use is that script, the probe reads its settings block, makes one
marker file in each base (or in the nearest directory of it that exists here, where
stage_in's `mkdir -p` would start), and runs one short step on a node (`srun -N1 -n1`,
a time limit of a minute, `--immediate`, under PROBE_STEP_TIMEOUT_S) that looks for the
markers: a marker the node cannot see is a base on this machine's own disk (/tmp on a
cluster of several machines).  The markers are removed whatever happens.  Without a
slurmctld that answers, it says it could not probe.
"""

from __future__ import annotations

import os
import re

from scrun_py.commands.doctor.context import Context
from scrun_py.commands.doctor.report import FAIL, OK, SKIP, WARN, Check

#: how long the one step may take, allocation included
PROBE_STEP_TIMEOUT_S = 30.0
#: how long the step may wait for a node (srun --immediate)
IMMEDIATE_S = 10
#: the shipped script names itself at its top
SCRIPT_MARK = "scrun-staging.lua:"
#: directories of a machine's own disk or memory, as the script's MACHINE_LOCAL
MACHINE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run")
NAME = "staging base"

_STRING = re.compile(r'^local\s+(STAGING_BASE|CACHE_BASE)\s*=\s*"([^"\\]*)"', re.MULTILINE)
_SETTING = re.compile(r"^local\s+(STAGING_BASE|CACHE_BASE|CACHE)\s*=", re.MULTILINE)
_CACHE = re.compile(r"^local\s+CACHE\s*=\s*(true|false)\b", re.MULTILINE)


def staging_bases(text: str, uid: int) -> dict[str, str] | None:
    """The bases the shipped script's settings name ({"STAGING_BASE": …, "CACHE_BASE":
    … when CACHE is on}, %u as `uid`; "" for one that is not a plain string or is
    unset); None when `text` is not that script."""
    if SCRIPT_MARK not in text[:400]:
        return None
    strings = dict(_STRING.findall(text))
    cache = _CACHE.search(text)
    names = ["STAGING_BASE"]
    if cache is None or cache.group(1) == "true":
        names.append("CACHE_BASE")
    set_names = set(_SETTING.findall(text))
    return {name: strings.get(name, "").replace("%u", str(uid))
            for name in names if name in set_names or name == "STAGING_BASE"}


def machine_local(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in MACHINE_LOCAL)


def nearest_existing(path: str) -> str:
    while not os.path.isdir(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path


def place_markers(bases: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """({base name: marker path}, problems here): one marker in each base's nearest
    existing directory, which must be writable here."""
    import secrets

    markers: dict[str, str] = {}
    problems: list[str] = []
    for name, base in bases.items():
        here = nearest_existing(base)
        marker = os.path.join(here, f".scrun-py-doctor-{secrets.token_hex(6)}")
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            problems.append(f"{name} {base}: cannot write in {here} here ({exc.strerror})")
            continue
        markers[name] = marker
    return markers, problems


def remove_markers(markers: dict[str, str]) -> None:
    for marker in markers.values():
        try:
            os.unlink(marker)
        except OSError:
            pass


def cluster_unreachable(ctx: Context) -> str:
    """Why no step can run ('' when one can): slurm.conf, the client commands,
    slurmctld (as the slurmctld check found it)."""
    if ctx.conf_problem:
        return ctx.conf_problem
    if ctx.missing:
        return "missing: " + ", ".join(ctx.missing)
    return "" if ctx.ctld_up else "slurmctld does not answer (see the slurmctld check)"


def staging_base(ctx: Context) -> Check:
    """The shipped staging script's bases are seen by a node (one step), or why it
    could not be asked."""
    if not ctx.lua_script:
        return Check(NAME, OK, "no staging script in use (see the scrun.lua check)")
    try:
        with open(ctx.lua_script, encoding="utf-8", errors="replace") as fh:
            bases = staging_bases(fh.read(), os.getuid())
    except OSError as exc:
        return Check(NAME, WARN, f"{ctx.lua_script}: {exc.strerror}")
    if bases is None:
        return Check(NAME, OK, f"no staging script ({ctx.lua_script} is not "
                               "scrun-staging.lua)")
    unset = [name for name, base in bases.items() if not base.startswith("/")]
    if unset:
        return Check(NAME, FAIL, f"{', '.join(unset)} not set to an absolute path in "
                                 f"{ctx.lua_script}",
                     "set it at the top of scrun.lua to a directory every node sees "
                     "(the shared scratch, with %u)")
    said = ", ".join(f"{name} {base}" for name, base in bases.items())
    why = cluster_unreachable(ctx)
    if why:
        local = [b for b in bases.values() if machine_local(b)]
        return Check(NAME, WARN if local else SKIP,
                     f"{said}: could not probe from a node: {why}",
                     f"{', '.join(local)}: a machine's own disk, which other nodes do not "
                     "see" if local else "")
    return probe(ctx, bases, said)


def probe(ctx: Context, bases: dict[str, str], said: str) -> Check:
    """Markers here, one step there, markers removed; what the node saw."""
    markers, problems = place_markers(bases)
    if problems:
        remove_markers(markers)
        return Check(NAME, FAIL, "; ".join(problems),
                     "make the base's directory writable by the users (stage_in makes "
                     "the base with mkdir -p)")
    try:
        from scrun_py.slurm.argv import build_staging_probe_argv

        rc, out = ctx.run_probe(build_staging_probe_argv(list(markers.values()), IMMEDIATE_S),
                                PROBE_STEP_TIMEOUT_S)
    finally:
        remove_markers(markers)
    lines = out.splitlines()
    node = next((ln.split(" ", 1)[1] for ln in lines if ln.startswith("node ")), "")
    if rc != 0 or not node:
        first = lines[0][:200] if lines else f"exit {rc}"
        return Check(NAME, SKIP, f"{said}: could not probe from a node: {first}")
    unseen, unwritable = node_report(lines, markers, bases)
    if unseen:
        return Check(NAME, FAIL, f"not visible from node {node}: {'; '.join(unseen)}",
                     "set STAGING_BASE (and CACHE_BASE) at the top of scrun.lua to a "
                     "directory of a filesystem every node shares, with %u")
    if unwritable:
        return Check(NAME, FAIL, f"{said}: node {node} sees {', '.join(unwritable)} but "
                                 "cannot write there",
                     "make it writable by the job's user on the nodes")
    return Check(NAME, OK, f"{said}: seen from node {node}")


def node_report(lines: list[str], markers: dict[str, str],
                bases: dict[str, str]) -> tuple[list[str], list[str]]:
    """(the bases whose marker the node did not see, the directories it saw but cannot
    write), from the step's `unseen N` / `unwritable N` lines (N: the marker's place)."""
    names = list(markers)
    unseen: list[str] = []
    unwritable: list[str] = []
    for line in lines:
        word, _, number = line.partition(" ")
        if not (number.isdigit() and 0 < int(number) <= len(names)):
            continue
        name = names[int(number) - 1]
        here = os.path.dirname(markers[name])
        if word == "unseen":
            unseen.append(f"{name} {bases[name]} (a marker made here in {here} is not "
                          "there)")
        elif word == "unwritable":
            unwritable.append(here)
    return unseen, unwritable
