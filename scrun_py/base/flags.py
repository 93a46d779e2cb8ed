"""The command line in three tables: verbs, flags and diagnostics levels.

The click layer (cli/click_app.py) builds its options from FLAGS; the click-free parser
(cli/fast_path.py) reads FLAGS and VERBS as cli/argv_table.py, which cli/argv_table_gen.py
writes from them, and does not import this module; base/logs.py and base/invocation.py
read LEVELS and DEFAULT_LEVELS; `python -m scrun_py.base.flags` writes the tables of
docs/levels.md; the tests walk all three.  Pure data plus lookups: its one import is
base/records.py (collections).

Flag sets: Slurm's scrun, runc 1.1 and crun 1.8 (plus crun's later `--log-level`).
An accepted flag either changes what scrun-py does ("applied"), or is recorded at
debug level and has no effect ("ignored": it configures something a Slurm job does
not have, such as cgroup managers, pivot_root or session keyrings).  `-f/--config` of
crun is "default-only": its default value is accepted, another is refused, because
scrun-py always reads config.json.
"""

from __future__ import annotations

from scrun_py.base.records import NamedTuple

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Literal
    Effect = Literal["applied", "ignored", "default-only"]
    Origin = Literal["scrun", "runc", "crun", "scrun-py"]
    Sink = Literal["stderr", "file", "syslog"]


# -- diagnostics levels -----------------------------------------------------------------


class Level(NamedTuple):
    word: str
    number: int  # stdlib-style: the higher, the more severe
    syslog: str  # name of the syslog priority records at this level carry


# Slurm's ladder, in its numeric order 0-9 (a level may be given as that digit).
# `warning` is not a Slurm level: it only exists for records (and crun's --log-level).
LEVELS: tuple[Level, ...] = (
    Level("quiet", 100, "LOG_CRIT"),
    Level("fatal", 50, "LOG_CRIT"),
    Level("error", 40, "LOG_ERR"),
    Level("info", 20, "LOG_INFO"),
    Level("verbose", 15, "LOG_INFO"),
    Level("debug", 10, "LOG_DEBUG"),
    Level("debug2", 9, "LOG_DEBUG"),
    Level("debug3", 8, "LOG_DEBUG"),
    Level("debug4", 7, "LOG_DEBUG"),
    Level("debug5", 6, "LOG_DEBUG"),
)
WARNING = Level("warning", 30, "LOG_WARNING")
LADDER: tuple[str, ...] = tuple(level.word for level in LEVELS)
# The words crun's --log-level takes, besides the ladder's.
CRUN_LOG_LEVELS: tuple[str, ...] = ("error", "warning", "debug")
# structlog method names → the record level they stand for.
METHOD_LEVELS: dict[str, str] = {"critical": "fatal", "fatal": "fatal", "exception": "error",
                                 "error": "error", "warning": "warning", "warn": "warning",
                                 "info": "info", "debug": "debug"}


_BY_WORD: dict[str, Level] = {lvl.word: lvl for lvl in (*LEVELS, WARNING)}


def level(word: str) -> Level:
    """The Level of a record level word (ladder word or `warning`); KeyError otherwise."""
    return _BY_WORD[word]


def level_word(value: str, *, extra: tuple[str, ...] = ()) -> str:
    """Canonical ladder word of `value`: a word in any case, or a digit 0-9.

    `extra` admits more words (crun's `warning`).  ValueError names the valid words.
    """
    text = value.strip().lower()
    if text.isascii() and text.isdigit() and int(text) < len(LADDER):
        return LADDER[int(text)]
    if text == "warn" and "warning" in extra:
        text = "warning"
    if text in LADDER or text in extra:
        return text
    words = ", ".join([*LADDER, *[w for w in extra if w not in LADDER]])
    raise ValueError(f"invalid debug level {value!r}: use {words} or a digit 0-9")


def step(word: str, count: int) -> str:
    """`count` steps more verbose along the ladder from `word` (stops at debug5)."""
    index = LADDER.index(word) if word in LADDER else LADDER.index("info")
    return LADDER[min(index + count, len(LADDER) - 1)]


class LevelSource(NamedTuple):
    name: str
    kind: Literal["env", "flag", "oci.conf", "default"]
    sinks: tuple[Sink, ...]
    where: Literal["every process", "anchor"]
    meaning: str


_ALL: tuple[Sink, ...] = ("stderr", "file", "syslog")

# Every place a level can be set, in the order they apply (a later row wins).
LEVEL_SOURCES: tuple[LevelSource, ...] = (
    LevelSource("(default)", "default", _ALL, "every process",
                "stderr error, --log file info, syslog quiet"),
    LevelSource("SCRUN_DEBUG", "env", _ALL, "every process",
                "sets stderr, --log file and syslog"),
    LevelSource("SCRUN_STDERR_DEBUG", "env", ("stderr",), "every process", "sets stderr"),
    LevelSource("SCRUN_FILE_DEBUG", "env", ("file",), "every process",
                "sets the --log file"),
    LevelSource("SCRUN_SYSLOG_DEBUG", "env", ("syslog",), "every process", "sets syslog"),
    LevelSource("--log-level", "flag", ("stderr", "file"), "every process",
                "crun's option: sets stderr and the --log file; also takes warning"),
    LevelSource("--debug", "flag", ("stderr", "file"), "every process",
                "stderr and the --log file at debug"),
    LevelSource("-v", "flag", ("stderr",), "every process",
                "each -v: stderr one step more verbose, from info or the level set above "
                "(whichever is more verbose)"),
    LevelSource("StdIODebug", "oci.conf", ("stderr",), "anchor", "sets the anchor's stderr"),
    LevelSource("FileDebug", "oci.conf", ("file",), "anchor",
                "sets the anchor's --log file"),
    LevelSource("SyslogDebug", "oci.conf", ("syslog",), "anchor", "sets the anchor's syslog"),
)
DEFAULT_LEVELS: dict[Sink, str] = {"stderr": "error", "file": "info", "syslog": "quiet"}
LEVEL_ENV: dict[str, tuple[Sink, ...]] = {
    s.name: s.sinks for s in LEVEL_SOURCES if s.kind == "env"}
LEVEL_OCI_CONF: dict[str, Sink] = {
    s.name: s.sinks[0] for s in LEVEL_SOURCES if s.kind == "oci.conf"}

# -- verbs ------------------------------------------------------------------------------


class Verb(NamedTuple):
    name: str
    supported: bool
    args: str  # the positional arguments, as usage shows them
    help: str


VERBS: tuple[Verb, ...] = (
    Verb("create", True, "<container-id>",
         "Create a container: allocate its Slurm job and stage it in."),
    Verb("start", True, "<container-id>", "Start a created container (launch its Slurm step)."),
    Verb("state", True, "<container-id>", "Print the container's OCI state as one JSON line."),
    Verb("kill", True, "<container-id> [signal]",
         "Send SIGNAL (default TERM; number or name, SIG optional) to the container."),
    Verb("delete", True, "<container-id>", "Delete a container: end its job, remove its state."),
    Verb("run", True, "<container-id>",
         "Create and start a container, wait for it, exit with its exit code."),
    Verb("features", True, "", "Print the runtime features JSON."),
    Verb("version", True, "", "Print the version."),
    Verb("doctor", True, "",
         "Check everything a site needs (Slurm, munge, oci.conf, scrun.lua, runtime, ...)."),
    Verb("list", True, "", "List the caller's containers under --root (with their Slurm "
         "job ids)."),
    Verb("spec", True, "", "Write a default config.json into the bundle."),
    Verb("example", True, "[name]",
         "Print an example site file: oci.conf, scrun.lua, scrun-staging.lua or "
         "scrun-py.toml (without NAME, the list)."),
    Verb("exec", True, "<container-id> [command...]",
         "Run a process in a running container (a step beside it on its node)."),
    Verb("ps", True, "<container-id>",
         "List the container's processes (pids on its compute node)."),
    *(Verb(name, False, "...", "(runc/crun verb; not supported by scrun-py)")
      for name in ("pause", "resume", "update", "checkpoint", "restore", "events", "mounts")),
)

# -- flags ------------------------------------------------------------------------------


class Flag(NamedTuple):
    verb: str  # "" = global option, given before the verb
    names: tuple[str, ...]
    dest: str
    value: str | None  # metavar of the value; None for a boolean flag
    effect: Effect
    origin: tuple[Origin, ...]
    help: str
    kind: Literal["str", "int", "count", "choice"] = "str"
    choices: tuple[str, ...] = ()
    default: str | None = None


_RUNC_CRUN: tuple[Origin, ...] = ("scrun", "runc", "crun")


def _create_flags(verb: str) -> tuple[Flag, ...]:
    return (
        Flag(verb, ("-b", "--bundle"), "bundle", "DIR", "applied", _RUNC_CRUN,
             "Path to the bundle (default: the current directory)."),
        Flag(verb, ("--pid-file",), "pid_file", "FILE", "applied", _RUNC_CRUN,
             "Write the container's process id (the anchor's) here."),
        Flag(verb, ("--console-socket",), "console_socket", "SOCKET", "applied", _RUNC_CRUN,
             "AF_UNIX socket that receives the pty master."),
        Flag(verb, ("--pidfd-socket",), "pidfd_socket", "SOCKET", "ignored", ("runc",),
             "(ignored: the container's process is on a compute node, no pidfd exists here)"),
        Flag(verb, ("--no-pivot",), "no_pivot", None, "ignored", _RUNC_CRUN,
             "(ignored: the runtime on the compute node sets up the rootfs)"),
        Flag(verb, ("--no-new-keyring",), "no_new_keyring", None, "ignored", _RUNC_CRUN,
             "(ignored: the runtime on the compute node owns the session keyring)"),
        Flag(verb, ("--preserve-fds",), "preserve_fds", "N", "ignored", _RUNC_CRUN,
             "(only 0: file descriptors cannot follow the container to a compute node; "
             "a non-zero N is refused)", kind="int", default="0"),
        Flag(verb, ("--no-subreaper",), "no_subreaper", None, "ignored", ("runc", "crun"),
             "(ignored: the anchor always reaps its children)"),
        Flag(verb, ("-f", "--config"), "config", "FILE", "default-only", ("crun",),
             "Config file name in the bundle: only config.json is supported.",
             default="config.json"),
    )


FLAGS: tuple[Flag, ...] = (
    # global options, before the verb
    Flag("", ("--root",), "root", "DIR", "applied", _RUNC_CRUN,
         "Directory for container state."),
    Flag("", ("--log",), "log_path", "FILE", "applied", _RUNC_CRUN,
         "Append log records (always the error that ends a command) to this file; crun's "
         "file:PATH form too (its syslog: and journald: forms are refused)."),
    Flag("", ("--log-format",), "log_format", "FORMAT", "applied", _RUNC_CRUN,
         "Format of the --log records.", kind="choice", choices=("text", "json"),
         default="text"),
    Flag("", ("--log-level",), "log_level", "LEVEL", "applied", ("crun",),
         "Level of stderr and the --log file: error, warning, debug, or a Slurm level "
         "(quiet, fatal, info, verbose, debug2..debug5)."),
    Flag("", ("--debug",), "debug", None, "applied", _RUNC_CRUN,
         "Debug logging (stderr and the --log file)."),
    Flag("", ("-v",), "verbosity", None, "applied", ("scrun",),
         "More verbose stderr, one level per -v; alone (without a verb) prints the "
         "version, like runc.", kind="count"),
    Flag("", ("-f", "--slurm-conf"), "slurm_conf", "FILE", "applied", ("scrun",),
         "slurm.conf to use (oci.conf and scrun.lua are found next to it)."),
    Flag("", ("--criu",), "criu", "PATH", "ignored", ("runc",),
         "(ignored: checkpoint and restore are not supported)"),
    Flag("", ("--systemd-cgroup",), "systemd_cgroup", None, "ignored", _RUNC_CRUN,
         "(ignored: Slurm places the job in its cgroup)"),
    Flag("", ("--cgroup-manager",), "cgroup_manager", "MANAGER", "ignored",
         ("scrun", "crun"), "(ignored: Slurm places the job in its cgroup)"),
    Flag("", ("--rootless",), "rootless", "VALUE", "ignored", _RUNC_CRUN,
         "(ignored: scrun-py is always rootless; the value may be left out)"),
    # per verb
    *_create_flags("create"),
    *_create_flags("run"),
    Flag("run", ("-d", "--detach"), "detach", None, "applied", ("runc", "crun"),
         "Return once the container runs; do not wait for it."),
    Flag("run", ("--keep",), "keep", None, "applied", ("runc",),
         "Do not delete the container after it exits."),
    Flag("kill", ("-a", "--all"), "all_", None, "ignored", _RUNC_CRUN,
         "(accepted and ignored, as in Slurm's scrun: the signal goes to the container's "
         "init process through oci.conf RunTimeKill, or with scancel to the container's "
         "step when that fails)"),
    Flag("kill", ("-r", "--regex"), "regex", None, "applied", ("crun",),
         "The id is an extended regular expression: signal every container whose id "
         "matches it."),
    Flag("delete", ("-f", "--force"), "force", None, "applied", _RUNC_CRUN,
         "Kill the container first if it is running."),
    Flag("delete", ("-r", "--regex"), "regex", None, "applied", ("crun",),
         "The id is an extended regular expression: delete every container whose id "
         "matches it."),
    Flag("doctor", ("--json",), "as_json", None, "applied", ("scrun-py",),
         "Print the checks as JSON."),
    Flag("list", ("-f", "--format"), "fmt", "FORMAT", "applied", ("runc", "crun"),
         "Output format (json adds slurmJobId to runc's fields).", kind="choice",
         choices=("table", "json"), default="table"),
    Flag("list", ("-q", "--quiet"), "quiet", None, "applied", ("runc", "crun"),
         "Print only the container ids."),
    Flag("exec", ("-p", "--process"), "process", "FILE", "applied", ("runc", "crun"),
         "process.json: args, env, cwd, user, terminal."),
    Flag("exec", ("-d", "--detach"), "detach", None, "applied", ("runc", "crun"),
         "Return once the process runs; its supervisor's pid goes to --pid-file."),
    Flag("exec", ("--pid-file",), "pid_file", "FILE", "applied", ("runc", "crun"),
         "Write the supervisor's pid (it exits with the process's status) here."),
    Flag("exec", ("--console-socket",), "console_socket", "SOCKET", "applied",
         ("runc", "crun"), "AF_UNIX socket that receives the pty master."),
    Flag("exec", ("-t", "--tty"), "tty", None, "applied", ("runc", "crun"),
         "Allocate a pseudo-TTY."),
    Flag("ps", ("-f", "--format"), "fmt", "FORMAT", "applied", ("runc", "crun"),
         "Output format: json is runc's array of pids; table a PID column.", kind="choice",
         choices=("table", "json"), default="table"),
    Flag("spec", ("-b", "--bundle"), "bundle", "DIR", "applied", ("runc", "crun"),
         "Bundle directory to write config.json into (default: the current directory)."),
    Flag("spec", ("--rootless",), "rootless", None, "applied", ("runc", "crun"),
         "Write the rootless variant (user namespace, uid/gid mappings, no cgroup "
         "namespace resources)."),
)

# Words that take the next word as their value when they come without `=VALUE`.
ROOTLESS_VALUES = ("true", "false", "auto", "1", "0")


def verb_flags(verb: str) -> tuple[Flag, ...]:
    return tuple(f for f in FLAGS if f.verb == verb)


def verb(name: str) -> Verb:
    return next(v for v in VERBS if v.name == name)


def usage_text(prog: str, only: str | None = None) -> str:
    """The short usage `--usage` prints: one line per verb with its options (or only
    verb `only`'s line)."""

    def options(flags: tuple[Flag, ...]) -> str:
        parts = []
        for f in flags:
            name = "|".join(f.names)
            parts.append(f"[{name}{'=' + f.value if f.value else ''}]")
        return " ".join(parts)

    lines = [f"Usage: {prog} [-h|--help|--usage] [-V|--version] {options(verb_flags(''))} "
             "COMMAND [OPTIONS] ARGS"]
    for v in VERBS:
        if only is not None and v.name == only:
            opts = options(verb_flags(v.name))
            return (f"Usage: {prog} [GLOBAL OPTIONS] {v.name}{' ' + opts if opts else ''}"
                    f"{' ' + v.args if v.args else ''}")
        if v.supported:
            opts = options(verb_flags(v.name))
            lines.append(f"       {prog} [GLOBAL OPTIONS] {v.name}"
                         f"{' ' + opts if opts else ''}{' ' + v.args if v.args else ''}")
    unsupported = ", ".join(v.name for v in VERBS if not v.supported)
    lines.append(f"Not supported (exit 1): {unsupported}.")
    return "\n".join(lines)


# -- the reference tables of docs/levels.md ----------------------------------------------

DOC_BEGIN = "<!-- tables:begin (generated by python -m scrun_py.base.flags) -->"
DOC_END = "<!-- tables:end -->"


def render_markdown() -> str:
    """docs/levels.md's generated block: the ladder, its sources, the verbs and flags."""
    out = ["### Levels", "", "| Digit | Word | Record level | syslog priority |",
           "|---|---|---|---|"]
    out += [f"| {i} | `{lvl.word}` | {'(nothing is logged)' if lvl.word == 'quiet' else lvl.word}"
            f" | {'-' if lvl.word == 'quiet' else lvl.syslog} |"
            for i, lvl in enumerate(LEVELS)]
    out += [f"| - | (`--log-level` only) `{WARNING.word}` | {WARNING.word} | {WARNING.syslog} |",
            "", "### Where a level is set (a later row wins)", "",
            "| Source | Kind | Sets | In | Meaning |", "|---|---|---|---|---|"]
    out += [f"| `{s.name}` | {s.kind} | {', '.join(s.sinks)} | {s.where} | {s.meaning} |"
            for s in LEVEL_SOURCES]
    out += ["", "### Verbs", "", "| Verb | Supported | Arguments | What it does |",
            "|---|---|---|---|"]
    out += [f"| `{v.name}` | {'yes' if v.supported else 'no (exit 1)'} | "
            f"{v.args.replace('<', '&lt;').replace('>', '&gt;') or '-'} | {v.help} |"
            for v in VERBS]
    out += ["", "### Flags", "", "| Verb | Flag | Value | Effect | From | Help |",
            "|---|---|---|---|---|---|"]
    out += [f"| {f.verb or '(global)'} | {', '.join(f'`{n}`' for n in f.names)} | "
            f"{f.value or '-'} | {f.effect} | {', '.join(f.origin)} | {f.help} |"
            for f in FLAGS]
    return "\n".join(out)


if __name__ == "__main__":
    print(render_markdown())
