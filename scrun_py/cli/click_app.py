"""The click layer: global options before the verb, one thin function per verb.

Every option comes from the table in base/flags.py (runc's, crun's and Slurm's scrun's);
the ones that have no meaning for a Slurm job are accepted and logged at debug
(fast_path.apply_table).  The verbs cli/fast_path.py also parses run through the same
commands.dispatch.run_verb; every failure ends in cli/fatal.py's fatal, as on the click-free
path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from scrun_py.base import flags
from scrun_py.base.errors import NotSupported
from scrun_py.base.invocation import Invocation
from scrun_py.base.version import version_text
from scrun_py.cli import fast_path
from scrun_py.cli.fatal import fail, fatal

UNSUPPORTED = tuple(v.name for v in flags.VERBS if not v.supported)
PROG = "scrun-py"
_CONTEXT = {"help_option_names": ["-h", "--help", "-?"]}


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit(0)


def _print_usage(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """Like crun's argp `--usage`: short usage on stdout, exit 0 (one verb's, after it)."""
    if value and not ctx.resilient_parsing:
        verb = ctx.command.name if ctx.parent is not None else None
        click.echo(flags.usage_text(PROG, verb))
        ctx.exit(0)


def _option(flag: flags.Flag) -> click.Option:
    """The click option for one row of flags.FLAGS."""
    common: dict[str, Any] = {"help": flag.help}
    if flag.kind == "count":
        return click.Option([*flag.names, flag.dest], count=True, **common)
    if flag.value is None:
        return click.Option([*flag.names, flag.dest], is_flag=True, **common)
    kind: Any = {"int": int, "choice": click.Choice(list(flag.choices))}.get(flag.kind, str)
    # a choice's metavar is left to click, which lists the choices: [text|json]
    return click.Option([*flag.names, flag.dest], type=kind,
                        metavar=None if flag.choices else flag.value,
                        default=int(flag.default) if flag.kind == "int" and flag.default
                        else flag.default,
                        show_default=flag.default is not None and flag.kind != "int", **common)


def _params(verb: str) -> list[click.Parameter]:
    params: list[click.Parameter] = [_option(f) for f in flags.verb_flags(verb)]
    params.append(click.Option(["--usage"], is_flag=True, expose_value=False, is_eager=True,
                               callback=_print_usage, help="Print a short usage and exit."))
    return params


def _register_verb(name: str) -> Callable[[Callable[..., None]], click.Command]:
    """Register `fn(inv, container_id?, **opts)` as verb `name` with the table's options."""

    def register(fn: Callable[..., None]) -> click.Command:
        info = flags.verb(name)
        params = _params(name)
        if "<container-id>" in info.args:
            params.append(click.Argument(["container_id"]))
        if "[signal]" in info.args:
            params.append(click.Argument(["signal"], required=False))

        @click.pass_obj
        def callback(inv: Invocation, /, **opts: Any) -> None:
            fast_path.apply_table(inv, name, opts)
            fn(inv, **opts)

        cmd = click.Command(name, callback=callback, params=params, help=info.help,
                            context_settings=_CONTEXT)
        scrun.add_command(cmd)
        return cmd

    return register


@click.group(invoke_without_command=True, context_settings=_CONTEXT,
             params=[*_params(""),
                     click.Option(["-V", "--version"], is_flag=True, expose_value=False,
                                  is_eager=True, callback=_print_version,
                                  help="Print the version.")])
@click.pass_context
def scrun(ctx: click.Context, /, **opts: Any) -> None:
    """Run OCI containers as Slurm jobs (a runc-compatible scrun).

    \b
    EXAMPLE:
      scrun-py --root /run/user/1000/scrun create --bundle ./bb --pid-file ./pid c1
      scrun-py --root /run/user/1000/scrun start c1
    """
    if ctx.invoked_subcommand is not None or not opts["verbosity"]:
        # before any verb acts, as on the click-free path; a lone -v is runc's --version,
        # which does not open the log
        fast_path.open_log(opts["log_path"])
    ctx.obj = inv = Invocation.resolve(
        root=opts["root"], log_path=opts["log_path"], log_format=opts["log_format"],
        debug=opts["debug"], verbosity=opts["verbosity"], slurm_conf=opts["slurm_conf"],
        log_level=opts["log_level"])
    fast_path.apply_table(inv, "", opts)
    if ctx.invoked_subcommand is None:
        # as runc: the version for a lone -v, else the help on stdout, exit 0
        click.echo(version_text() if opts["verbosity"] else ctx.get_help())


def _register_shared_verb(name: str) -> None:
    """Register a verb the click-free path runs too (commands.dispatch.run_verb)."""

    @_register_verb(name)
    def _(inv: Invocation, container_id: str, signal: str | None = None,
          **opts: Any) -> None:
        from scrun_py.commands.dispatch import run_verb

        run_verb(inv, name, [container_id] if signal is None else [container_id, signal],
                 opts)


for _name in fast_path.NO_CLICK_VERBS:
    _register_shared_verb(_name)


@_register_verb("features")
def _features(inv: Invocation) -> None:
    from scrun_py.commands import features as verb

    verb.run()


@_register_verb("doctor")
def _doctor(inv: Invocation, as_json: bool) -> None:
    from scrun_py.commands import doctor as verb

    verb.run(inv, as_json)


@_register_verb("list")
def _list(inv: Invocation, fmt: str, quiet: bool) -> None:
    from scrun_py.commands import list as verb

    verb.run(inv, fmt, quiet)


@_register_verb("exec")
def _exec(inv: Invocation, container_id: str, command: tuple[str, ...] = (),
          **opts: Any) -> None:
    from scrun_py.commands import exec as verb

    sys.exit(verb.run(inv, container_id, verb.ExecOptions(**opts), command))


# runc's positional form: `exec ID COMMAND...`, whose options after ID are COMMAND's
_exec.params.append(click.Argument(["command"], nargs=-1))
_exec.allow_interspersed_args = False


@_register_verb("ps")
def _ps(inv: Invocation, container_id: str, fmt: str) -> None:
    from scrun_py.commands import ps as verb

    verb.run(inv, container_id, fmt)


@_register_verb("spec")
def _spec(inv: Invocation, bundle: str | None, rootless: bool) -> None:
    from scrun_py.commands import spec as verb

    verb.run(inv, bundle, rootless)


@_register_verb("example")
def _example(inv: Invocation, name: str | None = None) -> None:
    from scrun_py.commands import examples as verb

    verb.run(name)


_example.params.append(click.Argument(["name"], required=False))


@_register_verb("version")
def _version(inv: Invocation) -> None:
    click.echo(version_text())


@_register_verb("run")
def _run(inv: Invocation, container_id: str, detach: bool, keep: bool, **opts: Any) -> None:
    from scrun_py.commands import run as verb
    from scrun_py.commands.create import CreateArgs

    args = CreateArgs(container_id, opts["bundle"], opts["pid_file"], opts["console_socket"])
    sys.exit(verb.run(inv, args, detach, keep))


def _unsupported(name: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True}, hidden=True)
    def cmd() -> None:
        raise NotSupported(name)

    return cmd


for _name in UNSUPPORTED:
    scrun.add_command(_unsupported(_name))


def _normalize(argv: list[str]) -> list[str]:
    """The global `--rootless` may come without a value (`--rootless create …`): give it
    one.  After the verb `spec`, `--rootless` is spec's own flag, which takes none."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "spec" and (i == 0 or argv[i - 1] not in ("--root", "--log", "-f")):
            return out + argv[i + 1:]
        if arg == "--rootless" and (i + 1 >= len(argv) or
                                    argv[i + 1] not in flags.ROOTLESS_VALUES):
            out.append("auto")
    return out


def main(argv: list[str] | None = None) -> NoReturn:
    args = _normalize(list(sys.argv[1:] if argv is None else argv))
    try:
        # not scrun.main(): it turns Ctrl-C into click.Abort, where the click-free
        # entry says `interrupted` (cli/fatal.py's fail)
        with scrun.make_context(PROG, list(args)) as ctx:  # click consumes the list
            scrun.invoke(ctx)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _fatal(args, exc.format_message(), exc.exit_code)
    except BaseException as exc:
        sys.exit(fail(args, exc))
    sys.exit(0)


def _fatal(args: list[str], msg: str, code: int) -> NoReturn:
    sys.exit(fatal(args, msg, code))
