"""The click layer: global options before the verb, one thin function per verb.

`main()` owns the single fatal path: one line on stderr, one error record in --log.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from scrun_py import version_text
from scrun_py.errors import NotSupported, ScrunError
from scrun_py.logs import fatal_record
from scrun_py.settings import Invocation

VERSION_TEXT = version_text()
UNSUPPORTED = ("exec", "pause", "resume", "ps", "update", "checkpoint", "restore", "events",
               "list", "spec")
_BOOL_WORDS = ("true", "false", "auto", "1", "0")


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(VERSION_TEXT)
        ctx.exit(0)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(path_type=Path, readable=False),
              help="Directory for container state.")
@click.option("--log", "log_path", type=click.Path(path_type=Path),
              help="Append error records to this file.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--debug", is_flag=True, help="Debug logging.")
@click.option("-f", "--slurm-conf", type=click.Path(path_type=Path),
              help="slurm.conf to use (oci.conf and scrun.lua are found next to it).")
@click.option("-v", "verbosity", count=True,
              help="More verbose; alone (without a command) prints the version, like runc.")
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print the version.")
@click.option("--rootless", hidden=True, help="(ignored: scrun-py is always rootless)")
@click.option("--systemd-cgroup", is_flag=True, hidden=True, help="(ignored)")
@click.option("--cgroup-manager", hidden=True, help="(ignored)")
@click.pass_context
def scrun(ctx: click.Context, root: Path | None, log_path: Path | None, log_format: str,
          debug: bool, slurm_conf: Path | None, verbosity: int, rootless: str | None,
          systemd_cgroup: bool, cgroup_manager: str | None) -> None:
    """Run OCI containers as Slurm jobs (a runc-compatible scrun).

    \b
    EXAMPLE:
      scrun-py --root /run/user/1000/scrun create --bundle ./bb --pid-file ./pid c1
      scrun-py --root /run/user/1000/scrun start c1
    """
    ctx.obj = Invocation.resolve(root=root, log_path=log_path, log_format=log_format,
                                 debug=debug, verbosity=verbosity, slurm_conf=slurm_conf)
    if ctx.invoked_subcommand is None:
        if verbosity:
            click.echo(VERSION_TEXT)
            return
        raise click.UsageError("command not provided")


@scrun.command()
@click.option("-b", "--bundle", help="Path to the bundle (default: current directory).")
@click.option("--pid-file", help="Write the container's process id (the anchor's) here.")
@click.option("--console-socket", help="AF_UNIX socket that receives the pty master.")
@click.option("--pidfd-socket", hidden=True, help="(ignored)")
@click.option("--no-pivot", is_flag=True, hidden=True, help="(ignored)")
@click.option("--no-new-keyring", is_flag=True, hidden=True, help="(ignored)")
@click.option("--preserve-fds", type=int, default=0, hidden=True, help="(ignored)")
@click.argument("container_id")
@click.pass_obj
def create(inv: Invocation, bundle: str | None, pid_file: str | None,
           console_socket: str | None, pidfd_socket: str | None, no_pivot: bool,
           no_new_keyring: bool, preserve_fds: int, container_id: str) -> None:
    """Create a container: allocate its Slurm job and stage it in.

    \b
    EXAMPLE:
      scrun-py create --bundle /path/to/bundle --pid-file /run/c1.pid c1
    """
    from scrun_py.commands import create as verb

    verb.run(inv, container_id, bundle, pid_file, console_socket)


@scrun.command()
@click.argument("container_id")
@click.pass_obj
def start(inv: Invocation, container_id: str) -> None:
    """Start a created container (launch its Slurm step)."""
    from scrun_py.commands import start as verb

    verb.run(inv, container_id)


@scrun.command()
@click.argument("container_id")
@click.pass_obj
def state(inv: Invocation, container_id: str) -> None:
    """Print the container's OCI state as one JSON line."""
    from scrun_py.commands import state as verb

    verb.run(inv, container_id)


@scrun.command()
@click.option("-a", "--all", "all_", is_flag=True, help="(accepted; the whole job is signalled)")
@click.argument("container_id")
@click.argument("signal", required=False)
@click.pass_obj
def kill(inv: Invocation, all_: bool, container_id: str, signal: str | None) -> None:
    """Send SIGNAL (default TERM; number or name, SIG optional) to the container."""
    from scrun_py.commands import kill as verb

    verb.run(inv, container_id, signal)


@scrun.command()
@click.option("-f", "--force", is_flag=True, help="Kill the container if it is running.")
@click.argument("container_id")
@click.pass_obj
def delete(inv: Invocation, force: bool, container_id: str) -> None:
    """Delete a container: end its job and remove its state."""
    from scrun_py.commands import delete as verb

    verb.run(inv, container_id, force)


@scrun.command()
def features() -> None:
    """Print the runtime features JSON."""
    from scrun_py.commands import features as verb

    verb.run()


@scrun.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_obj
def doctor(inv: Invocation, as_json: bool) -> None:
    """Check everything a site needs (Slurm, munge, oci.conf, scrun.lua, runtime, …)."""
    from scrun_py.commands import doctor as verb

    verb.run(inv, as_json)


@scrun.command()
def version() -> None:
    """Print the version."""
    click.echo(VERSION_TEXT)


@scrun.command("run")
@click.option("-b", "--bundle")
@click.option("--pid-file")
@click.option("--console-socket")
@click.option("-d", "--detach", is_flag=True)
@click.option("--keep", is_flag=True)
@click.option("--no-pivot", is_flag=True, hidden=True)
@click.option("--no-new-keyring", is_flag=True, hidden=True)
@click.option("--no-subreaper", is_flag=True, hidden=True)
@click.option("--preserve-fds", type=int, default=0, hidden=True)
@click.argument("container_id")
@click.pass_obj
def run_cmd(inv: Invocation, bundle: str | None, pid_file: str | None,
            console_socket: str | None, detach: bool, keep: bool, no_pivot: bool,
            no_new_keyring: bool, no_subreaper: bool, preserve_fds: int,
            container_id: str) -> None:
    """Create and start a container, wait for it, exit with its exit code."""
    from scrun_py.commands import run as verb

    sys.exit(verb.run(inv, container_id, bundle, pid_file, console_socket, detach, keep))


def _unsupported(name: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True}, hidden=True)
    def cmd() -> None:
        raise NotSupported(name)

    return cmd


for _verb in UNSUPPORTED:
    scrun.add_command(_unsupported(_verb))


def _normalize(argv: list[str]) -> list[str]:
    """`--rootless` may come without a value (`--rootless create …`): give it one."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--rootless" and (i + 1 >= len(argv) or argv[i + 1] not in _BOOL_WORDS):
            out.append("auto")
    return out


def _log_target(argv: list[str]) -> tuple[Path | None, str]:
    """--log/--log-format as given, for the fatal path even when parsing failed."""
    log_path: Path | None = None
    fmt = "text"
    for i, word in enumerate(argv):
        if word in ("--log", "--log-format") and i + 1 < len(argv):
            name, value = word, argv[i + 1]
        elif word.startswith(("--log=", "--log-format=")):
            name, _, value = word.partition("=")
        else:
            continue
        if name == "--log":
            log_path = Path(value)
        elif value in ("text", "json"):
            fmt = value
    return log_path, fmt


def main(argv: list[str] | None = None) -> NoReturn:
    args = _normalize(list(sys.argv[1:] if argv is None else argv))
    try:
        scrun.main(args=args, prog_name="scrun-py", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        _fatal(args, "aborted", 1)
    except click.ClickException as exc:
        _fatal(args, exc.format_message(), exc.exit_code)
    except ScrunError as exc:
        _fatal(args, str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fatal(args, "interrupted", 130)
    except Exception as exc:  # never a bare traceback as the only output
        _fatal(args, f"internal error: {exc!r}", 1)
    sys.exit(0)


def _fatal(args: list[str], msg: str, code: int) -> NoReturn:
    log_path, fmt = _log_target(args)
    fatal_record(msg, log_path, fmt)
    sys.exit(code)
