"""The one fatal path of every command, for both parsers (cli/fast_path.py and
cli/click_app.py, neither importing the other for it): one line on stderr and one error
record in the file --log names, even when the command line could not be parsed.

Imported only when a command fails: `state`, `start` and `delete` that succeed never
load it (tests/unit/test_imports.py)."""

from __future__ import annotations


def log_target(argv: list[str]) -> tuple[str | None, str]:
    """--log and --log-format as given among the global options (before the verb), for
    the fatal path even when parsing failed.  A word after the verb names no log file:
    `kill -- --log F` has the id `--log` and the signal F."""
    from scrun_py.base.invocation import log_file_name
    from scrun_py.cli.argv_table import OPTIONS

    log_name: str | None = None
    fmt = "text"
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-") or word == "--":
            break  # the verb, or the end of the options
        if "=" in word:
            name, _, value = word.partition("=")
            i += 1
        else:
            option = OPTIONS[""].get(word)
            if option is None or option[1] != "value":
                i += 1
                continue
            if i + 1 >= len(argv):
                break
            name, value = word, argv[i + 1]
            i += 2
        if name == "--log":
            log_name = log_file_name(value)
        elif name == "--log-format" and value in ("text", "json"):
            fmt = value
    return log_name, fmt


def fatal(argv: list[str], msg: str, code: int) -> int:
    """The end of a failed command: one line on stderr, one error record in --log."""
    from scrun_py.base.logs import fatal_record

    log_name, fmt = log_target(argv)  # the file already (crun's `file:` taken off)
    fatal_record(msg, log_name, fmt)
    return code


def fail(argv: list[str], exc: BaseException) -> int:
    """`fatal` for what a verb raised (never a bare traceback); its exit status."""
    from scrun_py.base.errors import ScrunError

    if isinstance(exc, ScrunError):
        return fatal(argv, str(exc), exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        return fatal(argv, "interrupted", 130)
    if isinstance(exc, Exception):
        return fatal(argv, f"internal error: {exc!r}", 1)
    raise exc
