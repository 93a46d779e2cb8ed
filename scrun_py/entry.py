"""Console-script entry: answers the hottest commands without importing click.

Engines call `--version` (podman info) and `create`/`start`/`delete` once per
container, and tools poll `state` often; click costs more than the work itself.  Only exact, simple
argv shapes take the fast path (the shapes docker and podman send); everything else
goes to the click CLI, which stays the single source of truth.

Either way the process ends with `os._exit` once stdout/stderr are flushed: every log
write is unbuffered, and tearing down the interpreter (pydantic after `create`) only
delays the engine, which waits for us.
"""

from __future__ import annotations

import sys

# `--version` and `state` import nothing more than they need: not even typing
# (mypy reads this name as typing's)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from scrun_py.anchor.launch import EarlyAnchor

_VERSION_ARGV = (["--version"], ["-v"], ["-V"], ["version"])
_VERBS = ("state", "start", "delete", "create")


class _Tables:
    """From the flags table: the globals with a value the fast path understands (every
    spelling → the first one), the ignored boolean globals docker sends, delete's
    --force, create's options with a value (every spelling → the dest) and the
    ignored booleans engines send (podman: --no-pivot, --no-new-keyring)."""

    def __init__(self) -> None:
        from scrun_py import flags

        self.value_globals = {name: f.names[0] for f in flags.verb_flags("")
                              if f.dest in ("root", "log_path", "log_format", "slurm_conf")
                              for name in f.names}
        self.flag_globals = {n: n for f in flags.verb_flags("")
                             if f.dest == "systemd_cgroup" for n in f.names}
        self.force = next(f.names for f in flags.verb_flags("delete") if f.dest == "force")
        self.create_values = {name: f.dest for f in flags.verb_flags("create")
                              if f.dest in ("bundle", "pid_file", "console_socket")
                              for name in f.names}
        self.create_ignored = {name: f.names[-1] for f in flags.verb_flags("create")
                               if f.dest in ("no_pivot", "no_new_keyring")
                               for name in f.names}


def _options(argv: list[str], i: int, values: dict[str, str], flags_: dict[str, str],
             opts: dict[str, str], ignored: list[str]) -> int | None:
    """Read `-x V`, `--x V`, `--x=V` (each value option at most once) and the boolean
    flags in `flags_` from argv[i:] into opts/ignored; the index after them, or None
    for anything else."""
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in flags_:
            ignored.append(flags_[argv[i]])
            i += 1
            continue
        name, eq, value = argv[i].partition("=")
        key = values.get(name)
        if key is None or key in opts:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        opts[key] = value
        i += 1
    return i


def _fast_call(argv: list[str]) -> dict[str, str] | None:
    """Parse `[globals] state|start ID`, `[globals] delete [--force|-f] ID` and
    `[globals] create [--bundle|-b B] [--pid-file P] [--console-socket S]
    [--no-pivot] [--no-new-keyring] ID`.

    Globals: --root, --log, --log-format, -f/--slurm-conf (each at most once, with a
    value) and the ignored flag --systemd-cgroup.  Returns {'verb', 'id', 'force',
    '--root', ..., 'bundle', ..., 'ignored', 'ignored_create'}, or None for anything else.
    """
    tables = _Tables()
    opts: dict[str, str] = {}
    ignored: list[str] = []
    i = _options(argv, 0, tables.value_globals, tables.flag_globals, opts, ignored)
    if i is None:
        return None
    rest = argv[i:]
    if not rest or rest[0] not in _VERBS:
        return None
    verb, args = rest[0], rest[1:]
    force = verb == "delete" and bool(args) and args[0] in tables.force
    if force:
        args = args[1:]
    create_opts: dict[str, str] = {}
    create_ignored: list[str] = []
    if verb == "create":
        j = _options(args, 0, tables.create_values, tables.create_ignored, create_opts,
                     create_ignored)
        if j is None:
            return None
        args = args[j:]
    if len(args) != 1 or args[0].startswith("-"):
        return None
    if opts.get("--log-format", "text") not in ("text", "json"):
        return None
    call = {**opts, **create_opts, "verb": verb, "id": args[0], "force": "1" if force else ""}
    if ignored:
        call["ignored"] = " ".join(ignored)
    if create_ignored:
        call["ignored_create"] = " ".join(create_ignored)
    return call


def _exit(code: int) -> NoReturn:
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        code = code or 1
    os._exit(code)


def _run_fast(call: dict[str, str], quick: Callable[[], int | None] | None = None) -> int:
    """Run the verb (`quick()` first, if given: its code, or None to go the full way);
    every failure is one line on stderr and one record in --log, as through click
    (cli.main), including errors nobody expected."""
    try:
        code = quick() if quick is not None else None
        return _dispatch(call) if code is None else code
    except BaseException as exc:
        return _failed(call, exc)


def _failed(call: dict[str, str], exc: BaseException) -> int:
    from scrun_py.errors import ScrunError
    from scrun_py.logs import fatal_record
    from scrun_py.settings import log_file

    log_path = log_file(call.get("--log"))
    log_format = call.get("--log-format", "text")
    if isinstance(exc, ScrunError):
        fatal_record(str(exc), log_path, log_format)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        fatal_record("interrupted", log_path, log_format)
        return 130
    if isinstance(exc, Exception):  # never a bare traceback as the only output
        fatal_record(f"internal error: {exc!r}", log_path, log_format)
        return 1
    raise exc


def _dispatch(call: dict[str, str]) -> int:
    early = None
    if call["verb"] == "create":
        from scrun_py.anchor.launch import EarlyAnchor

        # forked first: the anchor's imports run on the other CPU while create resolves
        # its options and reads the bundle
        early = EarlyAnchor.fork(call.get("-f"))
    try:
        return _verb(call, early)
    except BaseException:
        if early is not None and not early.sent:
            early.abandon()
        raise


def _verb(call: dict[str, str], early: EarlyAnchor | None) -> int:
    from scrun_py.settings import Invocation

    inv = Invocation.resolve(root=call.get("--root"), log_path=call.get("--log"),
                             log_format=call.get("--log-format", "text"),
                             slurm_conf=call.get("-f"))
    for flag in call.get("ignored", "").split():
        inv.note("debug", f"{flag} ignored", flag=flag, value=True)
    for flag in call.get("ignored_create", "").split():
        inv.note("debug", f"create {flag} ignored", flag=flag, value=True)
    if call["verb"] == "create":
        from scrun_py.commands import create

        create.run(inv, call["id"], call.get("bundle"), call.get("pid_file"),
                   call.get("console_socket"), early)
    elif call["verb"] == "state":
        from scrun_py.commands import state

        state.run(inv, call["id"])
    elif call["verb"] == "start":
        from scrun_py.commands import start

        start.run(inv, call["id"])
    else:
        from scrun_py.commands import delete

        delete.run(inv, call["id"], bool(call["force"]))
    return 0


def main() -> NoReturn:
    argv = sys.argv[1:]
    if argv in _VERSION_ARGV:
        from scrun_py import version_text

        sys.stdout.write(version_text() + "\n")
        _exit(0)
    if len(argv) >= 2 and argv[-2] == "state":
        import os

        from scrun_py.quick import answer

        line = answer(argv, os.environ)
        if line is not None:
            sys.stdout.write(line + "\n")
            _exit(0)
    elif "delete" in argv[-3:-1]:
        import os

        from scrun_py import quick

        if quick.delete(argv, os.environ):
            _exit(0)
    elif len(argv) >= 2 and argv[-2] == "start":
        import os

        from scrun_py import quick

        try:
            if quick.start(argv, os.environ):
                _exit(0)
        except BaseException as exc:  # quick.start takes a subset of _fast_call's shapes
            _exit(_failed(_fast_call(argv) or {}, exc))
    call = _fast_call(argv)
    if call is not None:
        _exit(_run_fast(call))
    from scrun_py.cli import main as cli_main

    try:
        cli_main(argv)
    except SystemExit as exc:
        code = exc.code
        _exit(code if isinstance(code, int) else (0 if code is None else 1))
