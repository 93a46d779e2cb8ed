"""The command line without click: one parser over the flag table (cli/argv_table.py,
which base/flags.py generates) and the flags that change nothing but a debug record.

entry.py parses argv here.  What this parser reads (`create`, `start`, `state`,
`kill`, `delete` with any of their options) runs without importing click; anything
else (help, usage, version, the other verbs, anything it cannot read) goes to the
click CLI (cli/click_app.py), which gives the usage errors.  Both run the same verbs
(commands/), with the same notes (`apply_table`) and the same fatal path (cli/fatal.py,
imported only when a command fails).
"""

from __future__ import annotations

from scrun_py.cli.argv_table import ARGS, OPTIONS, ROOTLESS_VALUES

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from scrun_py.base.invocation import Invocation

#: the verbs that run without click
NO_CLICK_VERBS = ("create", "start", "state", "kill", "delete")


class Call:
    """A parsed command line: the verb, the global options and the verb's options by
    their dest (only those given), and the positional arguments."""

    __slots__ = ("args", "globals", "options", "verb")

    def __init__(self, verb: str, globals_: dict[str, Any], options: dict[str, Any],
                 args: list[str]) -> None:
        self.verb = verb
        self.globals = globals_
        self.options = options
        self.args = args


def _option(argv: list[str], i: int, table: Mapping[str, Any],
            given: dict[str, Any]) -> int | None:
    """Read the option at argv[i] into `given`; the index after it, or None when the
    parser does not know it (click then reads the command line and words the error)."""
    name, eq, value = argv[i].partition("=")
    spec = table.get(name)
    if spec is None:
        return None
    dest, kind, _effect, _default, _record_name, choices = spec
    if kind in ("flag", "count"):
        if eq:
            return None
        given[dest] = given.get(dest, 0) + 1 if kind == "count" else True
        return i + 1
    if not eq:
        if kind == "optional" and (i + 1 >= len(argv) or argv[i + 1] not in ROOTLESS_VALUES):
            given[dest] = "auto"
            return i + 1
        if i + 1 >= len(argv):
            return None
        value = argv[i + 1]
        i += 1
    if choices and value not in choices:
        return None
    if kind == "int":
        try:
            given[dest] = int(value)
        except ValueError:
            return None
    else:
        given[dest] = value  # repeated: the last one, as click
    return i + 1


def parse(argv: list[str]) -> Call | None:
    """`[global options] VERB [options and arguments]` of a verb in NO_CLICK_VERBS, as
    click would read it (options may follow arguments; `--` ends the options); None
    for anything else."""
    globals_: dict[str, Any] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        after = _option(argv, i, OPTIONS[""], globals_)
        if after is None:
            return None
        i = after
    if i >= len(argv) or argv[i] not in NO_CLICK_VERBS:
        return None
    verb = argv[i]
    options: dict[str, Any] = {}
    args: list[str] = []
    table = OPTIONS[verb]
    i += 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            args += argv[i + 1:]
            break
        if word.startswith("-") and word != "-":
            after = _option(argv, i, table, options)
            if after is None:
                return None
            i = after
        else:
            args.append(word)
            i += 1
    wanted = ARGS[verb]
    if not len([w for w in wanted if not w.endswith("?")]) <= len(args) <= len(wanted):
        return None
    return Call(verb, globals_, options, args)


def apply_table(inv: Invocation, verb: str, given: Mapping[str, Any]) -> None:
    """Log each ignored option that was given (at debug); refuse a default-only option
    given another value than its default, and a non-zero --preserve-fds: runc and crun
    hand the container those descriptors, which cannot follow it to a compute node, and
    a program that was promised them (a socket-activated service) must not start
    without them."""
    seen: set[str] = set()
    for dest, _kind, effect, default, record_name, _choices in OPTIONS[verb].values():
        if dest in seen:
            continue
        seen.add(dest)
        value = given.get(dest)
        if value in (None, False, 0, default) or (default is not None and str(value) == default):
            continue
        where = f"{verb} " if verb else ""
        if effect == "ignored":
            inv.note("debug", f"{where}{record_name} ignored", flag=record_name, value=value)
        elif effect == "default-only":
            from scrun_py.base.errors import UsageError

            raise UsageError(f"{where}{record_name} {value}: only {default} is supported")
    if given.get("preserve_fds"):
        from scrun_py.base.errors import ScrunError

        raise ScrunError(f"{verb} --preserve-fds {given['preserve_fds']}: file descriptors "
                         "cannot follow the container to a compute node")


def open_log(log_path: str | None) -> None:
    """Fail unless --log (when given) can be appended to, as runc and crun do before the
    verb acts: ScrunError `open log file PATH: REASON` (crun's words), exit status 1.
    Otherwise the error record containerd and podman read back from the file would be
    lost without a word.

    The file is created (0644, as the records' writes create it), as runc and crun
    create it.  An empty write catches a file that opens but refuses writes
    (/proc/version opened by root, /dev/full); it writes nothing to a regular file.
    `state` is polled: this costs one open, one write and one close, and only with --log.
    """
    if log_path is None:
        return
    import os

    from scrun_py.base.invocation import log_file_name

    name = log_file_name(log_path)
    if name is None:
        return  # syslog:/journald: forms: Invocation.resolve refuses them
    from scrun_py.base import callerpath

    try:  # another user's symlink, a FIFO or a device there is refused at once
        fd = callerpath.open_file(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _log_error("open", name, exc) from None
    try:
        os.write(fd, b"")
    except OSError as exc:
        raise _log_error("write", name, exc) from None
    finally:
        os.close(fd)


def _log_error(what: str, name: str, exc: OSError) -> Exception:
    from scrun_py.base.errors import ScrunError

    return ScrunError(f"{what} log file {name}: {exc.strerror or exc}")


def run(argv: list[str], call: Call) -> int:
    """Run a parsed command line; its exit status."""
    early = None
    try:
        open_log(call.globals.get("log_path"))
        if call.verb == "create":
            from scrun_py.anchor.launch import EarlyAnchor

            # forked first: the anchor's imports run on the other CPU while create
            # resolves its options and reads the bundle
            early = EarlyAnchor.fork(call.globals.get("slurm_conf"))
        from scrun_py.base.invocation import Invocation

        g = call.globals
        inv = Invocation.resolve(root=g.get("root"), log_path=g.get("log_path"),
                                 log_format=g.get("log_format", "text"),
                                 debug=bool(g.get("debug")), verbosity=g.get("verbosity", 0),
                                 slurm_conf=g.get("slurm_conf"), log_level=g.get("log_level"))
        apply_table(inv, "", g)
        apply_table(inv, call.verb, call.options)
        from scrun_py.commands.dispatch import run_verb

        run_verb(inv, call.verb, call.args, call.options, early)
        return 0
    except BaseException as exc:
        if early is not None and not early.sent:
            early.abandon()
        from scrun_py.cli.fatal import fail

        return fail(argv, exc)
