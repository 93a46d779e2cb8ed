"""The reliability cases: hostile input, faults, load, security.

One row per case: the id that the test carrying `@pytest.mark.case(ID)` names, the area,
the input or event, and the expected behaviour.  docs/reliability.md holds this table
verbatim between its `cases` markers; tests/test_docs_reliability.py fails when the doc,
this table and the tests' markers disagree.  Regenerate the doc block with
`python -m tests.reliability_cases`.

Every bad-input case (BI-*) also expects, unless its row says otherwise: one line on
stderr, one `{"level":"error",…}` record in `--log`, a non-zero exit, and nothing left
(no job, anchor, socket, spool dir or pid file).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple


class Case(NamedTuple):
    id: str
    area: str
    case: str
    expected: str


_CLEAN = "nothing left"

CASES: tuple[Case, ...] = (
    # -- bad input: the bundle and config.json ---------------------------------------------
    Case("BI-01", "bundle", "`--bundle` names a missing directory",
         "create fails: `bundle …: not a directory`"),
    Case("BI-02", "bundle", "`--bundle` names a regular file",
         "create fails: `bundle …: not a directory`"),
    Case("BI-03", "bundle", "no config.json in the bundle",
         "create fails: `config.json not found`"),
    Case("BI-04", "bundle", "config.json is not JSON",
         "create fails: `config.json is not valid JSON: …`"),
    Case("BI-05", "bundle", "config.json is a JSON array",
         "create fails: `config.json must be a JSON object`"),
    Case("BI-06", "bundle", "`process.args` is a string, not a list",
         "create fails naming `process.args`"),
    Case("BI-07", "bundle", "`process.args` is empty",
         "create fails: `process.args: value error, must not be empty`"),
    Case("BI-08", "bundle", "`root.path` missing",
         "create fails: `root.path is required`"),
    Case("BI-09", "bundle", "`process.env` holds a number",
         "create fails naming `process.env.0`"),
    Case("BI-10", "bundle", "the rootfs directory is missing",
         "create fails: `rootfs … is not a directory`"),
    Case("BI-11", "bundle", "the bundle is unreadable (chmod 000, ordinary user)",
         "create fails: `config.json is not readable`"),
    Case("BI-12", "bundle", "`process.terminal` true without `--console-socket`",
         "create fails: `process.terminal is true but no --console-socket was given`"),
    # -- bad input: site configuration -----------------------------------------------------
    Case("BI-13", "oci.conf", "unknown key", "create fails naming the key"),
    Case("BI-14", "oci.conf", "bad value (`CreateEnvFile=sometimes`)",
         "create fails naming `CreateEnvFile`"),
    Case("BI-15", "oci.conf", "`RunTimeRun` together with `RunTimeCreate`/`RunTimeStart`",
         "create fails: `… mutually exclusive …`"),
    Case("BI-16", "oci.conf", "oci.conf missing next to slurm.conf",
         "create fails naming oci.conf (never runs the command on the host)"),
    Case("BI-17", "scrun.lua", "syntax error", "create fails naming scrun.lua, before any job"),
    Case("BI-18", "scrun.lua", "raises an error while loading",
         "create fails naming scrun.lua and the Lua message"),
    Case("BI-19", "scrun.lua", "`SCRUN_PY_LUA` names a missing file",
         "create fails: `…: scrun.lua not found`"),
    Case("BI-20", "SCRUN_*", "`SCRUN_TIMELIMIT=soon`", "create fails with salloc's reason"),
    Case("BI-21", "SCRUN_*", "`SCRUN_PARTITION` names an unknown partition",
         "create fails with Slurm's reason (Slurm's scrun exits 0)"),
    Case("BI-22", "SCRUN_*", "`SCRUN_JOB_NUM_NODES=many`", "create fails with salloc's reason"),
    Case("BI-23", "SCRUN_*", "`SCRUN_PY_ALLOC_TIMEOUT=later`",
         "create fails: `SCRUN_PY_ALLOC_TIMEOUT: not a number`"),
    # -- bad input: verbs and ids ----------------------------------------------------------
    Case("BI-24", "kill", "unknown signal name (`SIGFOO`, `NOPE`) on a running container",
         "kill fails: `unknown signal …`; the container keeps running"),
    Case("BI-25", "kill", "out-of-range signal number (`0`, `65`, `99999`) on a running "
         "container", "kill fails: `invalid signal: …`; the container keeps running"),
    Case("BI-26", "ids", "unknown id for `state`, `start`, `kill`, `kill --all`, `delete`",
         "fails: `container does not exist` (runc's words)"),
    Case("BI-27", "ids", "`delete --force` of an unknown id",
         "succeeds, as runc's does"),
    Case("BI-28", "ids", "duplicate id",
         "create fails: `container with given ID already exists`; the first is unaffected"),
    Case("BI-29", "ids", "id with `/`", "fails: `invalid container ID format`, before any I/O"),
    Case("BI-30", "ids", "id `..` or `.`", "fails: `invalid container ID format`"),
    Case("BI-31", "ids", "empty id", "fails: `invalid container ID format: empty`"),
    Case("BI-32", "ids", "id of 256 or 2000 characters",
         "fails: `invalid container ID format: too long`"),
    Case("BI-33", "ids", "id with a newline or undecodable bytes (NUL cannot be passed: "
         "execve arguments are C strings)", "fails: `invalid container ID format`"),
    Case("BI-34", "--root", "`--root` is a regular file",
         "create fails: `cannot create root directory …`"),
    Case("BI-35", "--root", "`--root` not writable (ordinary user)",
         "create fails: `cannot create root directory …: Permission denied`"),
    Case("BI-36", "--root", "`--root` of 200 characters",
         "works: full create/start/state/delete lifecycle (socket bound via /proc/self/fd)"),
    Case("BI-37", "--pid-file", "pid file in a missing directory",
         "create fails: `pid file directory does not exist: …`, before any job"),
    Case("BI-38", "usage", "verb without its container id (`create`, `start`, `state`, "
         "`kill`, `delete`)", "usage error, exit 2: `Missing argument 'CONTAINER_ID'.`"),
    Case("BI-39", "usage", "extra arguments (`state a b`, `kill a TERM x`, `delete a b`)",
         "usage error, exit 2: `Got unexpected extra argument (…)`"),
    Case("BI-40", "usage", "unknown verb, unknown global option, bad `--log-format`",
         "usage error, exit 2"),
    Case("BI-41", "usage", "runc verb scrun-py does not implement (`pause`, `update`)",
         "fails: `… is not supported by scrun-py`"),
    Case("BI-42", "state", "`start` of a running container, then of a stopped one",
         "fails: `cannot start an already running container` / `… that has stopped`; "
         "the container is unaffected"),
    Case("BI-43", "state", "`kill` of a stopped container",
         "fails: `container not running` (runc's words)"),
    # -- faults ----------------------------------------------------------------------------
    Case("F-01", "slurmctld", "slurmctld down when `create` runs",
         "create fails after `SCRUN_PY_ALLOC_TIMEOUT` seconds naming the job allocation; "
         + _CLEAN),
    Case("F-02", "slurmctld", "slurmctld restarted while a container runs",
         "the container finishes normally, exit code and output intact"),
    Case("F-03", "anchor", "anchor killed with SIGKILL while the container runs",
         "`state` says stopped; the holder kills the container and ends the job; "
         "`delete --force` cleans up; no orphan job"),
    Case("F-04", "anchor", "SIGTERM or SIGINT to the anchor while the container runs",
         "container stopped, stage_out run, job ended, anchor exits non-zero; " + _CLEAN),
    Case("F-05", "scrun.lua", "stage_in returns -1",
         "create fails naming scrun.lua; the job is ended; " + _CLEAN),
    Case("F-06", "time limit", "the job's time limit (`SCRUN_TIMELIMIT=1`) is reached while "
         "the container runs", "the container gets SIGTERM (its trap runs); the job ends, "
         "`state` says stopped, the anchor exits with the container's code; " + _CLEAN),
    Case("F-07", "time limit", "a stage_in that hangs (`os.execute(\"sleep 600\")`) with "
         "`SCRUN_TIMELIMIT=1`", "create fails before the time limit: `container creation "
         "interrupted: time limit reached during create`; the hook's commands are killed; "
         + _CLEAN),
    Case("F-08", "time limit", "the time limit is reached by a container that ignores "
         "SIGTERM", "TERM then KILL through the runtime before Slurm's own kill: the anchor "
         "exits 137, the job ends FAILED, the node does not drain; " + _CLEAN),
    Case("F-09", "scancel", "`scancel` of the job while its container runs (an init that "
         "ignores SIGTERM)", "the anchor exits 137 and logs `job ended while the container "
         "ran`; `state` says stopped; stage_out runs; Slurm's kill reaches the container "
         "(oci.conf `RunTimeRun=\"exec …\"`), the job ends, the node does not drain; "
         + _CLEAN),
    # -- load ------------------------------------------------------------------------------
    Case("L-01", "load", "50 containers through `scrun-py run` at once (ordinary user)",
         "each prints its own id and exits with its own code (i % 7); no job, anchor or "
         "spool dir left"),
    Case("L-02", "load", "20 clients running `state` on one container during "
         "create/start/exit", "every answer is valid JSON with a legal status that never "
         "goes backwards; failures only `container does not exist` before create"),
    Case("L-03", "load", "20 containers through rootless `podman run --rm` at once "
         "(ordinary user)", "each is its own job, prints its own line and exits with its own "
         "code (i % 5); no container, job, anchor, spool dir or staged rootfs left"),
    # -- security --------------------------------------------------------------------------
    Case("S-01", "isolation", "another user runs `state`/`start`/`kill`/`delete` on the "
         "container (same `--root`)", "fails: permission denied; the container is unaffected"),
    Case("S-02", "isolation", "another user reaches the socket (owner opened the directory "
         "modes)", "the anchor refuses by `SO_PEERCRED`: `permission denied: container "
         "belongs to another user`; the container is unaffected"),
    Case("S-03", "files", "modes of `--root`, the spool dir and the socket",
         "0700 dirs and a 0600 socket owned by the user"),
    Case("S-04", "files", "a symlink planted at the `--pid-file` path",
         "replaced by rename, not followed: its target is untouched"),
    Case("S-05", "environment", "`PATH=/nonexistent`, `LD_PRELOAD=/nonexistent.so` in "
         "`process.env`", "not imported into scrun-py (create and the job work); the "
         "container still gets them"),
    Case("S-06", "environment", "`SCRUN_TIMELIMIT` in `process.env`",
         "imported: the job gets that time limit"),
    Case("S-07", "scrun.lua", "`slurm.set_bundle_path` with a relative path, a number, or "
         "a path with NUL", "a Lua error that fails create with a clear message; " + _CLEAN),
    Case("S-08", "environment", "`create` run from a directory holding a `scrun_py` package "
         "(podman runs the runtime in the caller's directory)",
         "the anchor imports only the installed scrun-py: the planted package never runs"),
    Case("S-09", "shared host", "another user makes the caller's `--root` first in a shared "
         "sticky directory (the `/tmp` fallback), mode 0777, 01777 or 0755",
         "create fails: `root directory … belongs to uid N, not to uid M: refusing it`; "
         "nothing is made in it; " + _CLEAN),
    Case("S-10", "shared host", "the caller's own `--root` is writable by others (0777)",
         "create fails: `… is writable by other users (mode 0777): refusing it`; at 0700 "
         "the same create works"),
    Case("S-11", "shared host", "an image's ENV sets `SLURM_CONF`, `SLURM_JOB_ID`, "
         "`SCRUN_PROLOG`, `SLURM_PROLOG`, `SCRUN_TASK_PROLOG` or `SLURM_TASK_PROLOG`",
         "not imported: a new job, the program never runs, a warning in `--log` names the "
         "variable; where the site's `[trust] container_env` allows it, it has its effect"),
    Case("S-12", "shared host", "a user passes `-f` to a slurm.conf copy of their own, "
         "beside a scrun-py.toml without the site's policy",
         "escapes the policy, unless the system's scrun-py.toml says `[trust] site_files = "
         "\"system\"`: then the site's policy refuses the container"),
    Case("S-13", "shared host", "`SCRUN_PY_LUA` names the caller's own scrun.lua",
         "runs, unless the system's scrun-py.toml says `[trust] lua_override = false`: then "
         "create fails in one line naming that setting, the script never runs"),
    Case("S-14", "shared host", "scrun-py runs as root of the user's own user namespace "
         "(rootless podman's situation) with a per-user audit file",
         "every record names the real user and uid, never root; the file is the user's"),
    Case("S-15", "shared host", "another user makes the caller's staging cache directory "
         "first (0777, where `/tmp/scrun-cache-UID` would be)",
         "not used: the rootfs is copied, the log says why, nothing is cached there; the "
         "user's own cache is used"),
    Case("S-16", "shared host", "another user makes the caller's staging directory first "
         "(where `/tmp/scrun-staging-UID` would be)",
         "create fails with the reason (`… is not a directory owned by uid N`), nothing is "
         "staged there; " + _CLEAN),
    Case("S-17", "shared host", "an image with a top-level directory named `x<newline>dir=..` "
         "(staging script with the cache)",
         "its rootfs is copied, never mounted from overlays of the cache; the log says why; "
         "the container sees the directory"),
)

BEGIN = "<!-- cases:begin (generated by python -m tests.reliability_cases) -->"
END = "<!-- cases:end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"


def render() -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| Id | Area | Case | Expected |", "|---|---|---|---|"]
    rows += [f"| {c.id} | {cell(c.area)} | {cell(c.case)} | {cell(c.expected)} |"
             for c in CASES]
    return "\n".join(rows)


def doc_block(text: str) -> str | None:
    match = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return match.group(1).rstrip("\n") if match else None


def write_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    if doc_block(text) is None:
        sys.exit(f"{DOC}: no {BEGIN} … {END} block")
    new = re.sub(re.escape(BEGIN) + r"\n.*?" + re.escape(END),
                 lambda _m: f"{BEGIN}\n{render()}\n{END}", text, flags=re.S)
    DOC.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    write_doc()
