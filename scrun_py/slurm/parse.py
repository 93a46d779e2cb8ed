"""Parsers for what Slurm's client commands print (squeue, srun --version, salloc's
stderr).  Pure: text in, typed values out."""

from __future__ import annotations

import re
import time

from scrun_py.base.version import parse_release

# salloc says so when the job is cancelled or fails while its command still runs
REVOKED_RE = re.compile(r"[Jj]ob allocation \d+ has been revoked")
JOB_ID_RE = re.compile(r"(?:job allocation|Pending job allocation|Granted job allocation) (\d+)")
# salloc says so when slurmctld queues the job instead of granting it at once
PENDING_RE = re.compile(r"salloc: Pending job allocation (\d+)")
_NOISE = ("salloc: Granted job allocation", "salloc: Pending job allocation",
          "salloc: job ", "salloc: Waiting for resource configuration",
          "salloc: Nodes ", "salloc: Relinquishing job allocation",
          "salloc: Job allocation")
_PREFIX_RE = re.compile(r"^[\w.-]+: (?:error|fatal): ")
_MAX_ERROR_LINES = 3
_VERSION_RE = re.compile(r"(\d+)\.(\d+)")
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


def slurm_message(lines: list[str]) -> str:
    """A failed Slurm command's stderr in one line: its last few error lines.

    Slurm often logs the cause before a generic summary, e.g. a required SPANK
    plugin: "<plugin's own message>", "spank: required plugin x.so: init_post_opt()
    failed with rc=-1", "Plugin stack post-option processing failed".  The last
    line alone would hide which plugin failed and why.
    """
    useful = [ln.strip() for ln in lines if ln.strip() and not ln.startswith(_NOISE)]
    errors: list[str] = []
    for ln in reversed(useful):
        if ("error" in ln.lower() or "fatal" in ln.lower()) and ln not in errors:
            errors.insert(0, ln)
            if len(errors) == _MAX_ERROR_LINES:
                break
    if not errors:
        return (useful or [ln.strip() for ln in lines] or ["no output"])[-1]
    # "salloc: error: a", "salloc: error: b" → "salloc: error: a; b"
    prefix = _PREFIX_RE.match(errors[0])
    rest = [ln[prefix.end():] if prefix and ln.startswith(prefix.group()) else ln
            for ln in errors[1:]]
    return "; ".join([errors[0], *rest])


def parse_version(text: str) -> tuple[int, int] | None:
    """`srun --version` ("slurm 22.05.8", "slurm-wlm 24.11.1") → (major, minor): the
    release base/version.py `parse_release` reads (the one reader of that line, which
    `--version` uses without importing slurm/)."""
    release = parse_release(text)
    m = _VERSION_RE.match(release) if release else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_slurm_time(text: str) -> float | None:
    """squeue's %e (local time, e.g. 2026-11-29T12:45:00) → epoch; None if unlimited."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_step_ids(text: str, name: str) -> list[int]:
    """`squeue --steps --format=%i|%j` → the step ids of the steps called `name`."""
    ids = []
    for line in text.splitlines():
        step, _, step_name = line.strip().partition("|")
        _, _, sid = step.partition(".")
        if step_name == name and sid.isdigit():
            ids.append(int(sid))
    return ids


def parse_job_info(text: str) -> tuple[float | None, int | None, int | None]:
    """`squeue --format=%e|%U|%G` → (end time, uid, gid); None for what is missing."""
    end_s, _, ids = text.strip().partition("|")
    uid_s, _, gid_s = ids.partition("|")
    try:
        uid, gid = int(uid_s), int(gid_s)
    except ValueError:
        return parse_slurm_time(end_s), None, None
    return parse_slurm_time(end_s), uid, gid


def parse_job_reason(text: str) -> tuple[str, str] | None:
    """`squeue --format=%T|%r` → (state, reason); None when there is no such line (squeue
    no longer knows the job).  A reason may hold spaces and commas
    ("ReqNodeNotAvail, UnavailableNodes:vm")."""
    for line in text.splitlines():
        state, sep, reason = line.strip().partition("|")
        if sep and state:
            return state, reason.strip()
    return None


def signal_marks(text: str, mark: str) -> set[str]:
    """The `NODE:TASK` containers a marked signal command reports as signalled (each on a
    line `MARK NODE:TASK`; srun may interleave its own lines)."""
    found = set()
    for line in text.splitlines():
        word = line.split()
        if len(word) == 2 and word[0] == mark:
            found.add(word[1])
    return found


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compact host list (squeue's `n[1-3,5],login`) as names, in order;
    ValueError when it is not understood.  oci/taskenv.py has its own copy: nodes run
    that file with the standard library alone (a copy of the file, without scrun-py
    installed), so it cannot import this one."""
    names: list[str] = []
    for item in _split_top(text):
        if "[" not in item:
            names.append(item)
            continue
        head, _, rest = item.partition("[")
        body, sep, tail = rest.partition("]")
        if not sep or "[" in tail:
            raise ValueError(f"host list not understood: {text!r}")
        for part in body.split(","):
            m = _RANGE_RE.match(part)
            if not m:
                raise ValueError(f"host list not understood: {text!r}")
            lo, hi = m.group(1), m.group(2) or m.group(1)
            names += [f"{head}{n:0{len(lo)}d}{tail}" for n in range(int(lo), int(hi) + 1)]
    return names


def _split_top(text: str) -> list[str]:
    """Split on the commas that are not inside brackets."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += (ch == "[") - (ch == "]")
        cur += ch
    items.append(cur)
    return [i for i in items if i]


def max_tasks_per_node(tasks_per_node: str) -> int:
    """SLURM_TASKS_PER_NODE ("2(x3),1") -> the largest count (1 if unknown).  The one
    other reader of this format, oci/taskenv.py's strict expand_counts, stands alone
    (nodes run it without scrun-py installed), so it cannot be this one."""
    best = 1
    for part in tasks_per_node.split(","):
        head = part.split("(", 1)[0].strip()
        if head.isdigit():
            best = max(best, int(head))
    return best


_STEP_LAUNCH_FAILURE = re.compile(
    rb"srun: error: Unable to (?:create step|confirm allocation) for job \d+: (.+?)\r?\n?")
# srun gives up at once when slurmctld cannot be reached (restarting, say) while it
# creates the step; 22.05's srun rode a short restart out, 24.11's does not
_TRANSIENT = ("Connection reset by peer", "Connection refused", "Socket timed out",
              "Unable to contact slurm controller", "Zero Bytes were transmitted",
              "Transport endpoint is not connected", "Broken pipe",
              "Communication connection failure")


def step_launch_failure(line: bytes) -> str | None:
    """The reason in srun's "Unable to create step for job N: REASON" line, else None."""
    m = _STEP_LAUNCH_FAILURE.fullmatch(line)
    return m.group(1).decode(errors="replace") if m else None


def transient_launch_failure(reason: str) -> bool:
    """A step that could not be created because slurmctld did not answer: trying again
    later can work (the container never ran)."""
    return any(t in reason for t in _TRANSIENT)


# what `scontrol ping` prints under its DOWN lines
_PING_BANNER = ("RESTORE SLURMCTLD DAEMON TO SERVICE",)


def parse_ping(status: int, text: str) -> tuple[bool, str, str | None]:
    """`scontrol ping`'s exit status and output → (up, what it said, auth).

    `what it said`: the first line when slurmctld is up; else its DOWN lines, or the last
    line that is not the banner of asterisks scontrol ends with, or `exit N`.  `auth`:
    None, or (when this host cannot authenticate to slurmctld) the munge error without
    scontrol's prefix ("munge" when scontrol names none)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if status == 0 and "UP" in text:
        return True, lines[0], None
    down = [ln for ln in lines if ln.endswith(" is DOWN")]
    said = [ln for ln in lines if ln.strip("*").strip()
            and not any(b in ln for b in _PING_BANNER)]
    found = "; ".join(down) if down else (said[-1] if said else f"exit {status}")
    if "Munge encode failed" in text or "authentication error" in text:
        auth = next((ln for ln in lines if "Munge encode failed" in ln), "")
        return False, found, auth.removeprefix("scontrol: error: ") or "munge"
    return False, found, None
