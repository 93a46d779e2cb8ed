"""Every flag and verb of runc 1.1, crun 1.8 and Slurm's scrun, driven from base/flags.py.

The CLI runs in-process through `click_app.main(argv)`; the verbs' `run` functions are
replaced by mocks (mocks only for wiring), so no anchor starts.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import click
import pytest

from scrun_py.base import flags
from scrun_py.cli import click_app
from tests.unit.cli_run import run

# What each runtime's own option parser declares (runc 1.1, crun 1.8, Slurm's scrun),
# as read from their sources.
UPSTREAM: dict[str, dict[str, set[str]]] = {
    "runc": {
        "": {"--debug", "--log", "--log-format", "--root", "--criu", "--systemd-cgroup",
             "--rootless"},
        "create": {"--bundle", "-b", "--console-socket", "--pid-file", "--no-pivot",
                   "--no-new-keyring", "--preserve-fds"},
        "run": {"--bundle", "-b", "--console-socket", "--detach", "-d", "--keep",
                "--pid-file", "--no-subreaper", "--no-pivot", "--no-new-keyring",
                "--preserve-fds"},
        "start": set(), "state": set(), "features": set(),
        "kill": {"--all", "-a"},
        "delete": {"--force", "-f"},
        "list": {"--format", "-f", "--quiet", "-q"},
        "spec": {"--bundle", "-b", "--rootless"},
        "ps": {"--format", "-f"},
        "exec": {"--process", "-p", "--detach", "-d", "--pid-file", "--console-socket",
                 "--tty", "-t"},
    },
    "crun": {
        "": {"--debug", "--cgroup-manager", "--systemd-cgroup", "--log", "--log-format",
             "--root", "--rootless", "--log-level"},
        "create": {"--bundle", "-b", "--config", "-f", "--console-socket", "--preserve-fds",
                   "--no-pivot", "--pid-file", "--no-subreaper", "--no-new-keyring"},
        "run": {"--bundle", "-b", "--config", "-f", "--detach", "-d", "--console-socket",
                "--preserve-fds", "--pid-file", "--no-subreaper", "--no-new-keyring",
                "--no-pivot"},
        "start": set(), "state": set(), "features": set(),
        "kill": {"--all", "-a", "--regex", "-r"},
        "delete": {"--force", "-f", "--regex", "-r"},
        "list": {"--format", "-f", "--quiet", "-q"},
    },
    "scrun": {
        "": {"--cgroup-manager", "--debug", "--log", "--log-format", "--root", "--rootless",
             "--systemd-cgroup", "-f", "-v"},
        "create": {"--bundle", "-b", "--console-socket", "--no-pivot", "--no-new-keyring",
                   "--preserve-fds", "--pid-file"},
        "start": set(), "state": set(),
        "kill": {"--all"},
        "delete": {"--force", "-f"},
    },
}
RUNC_VERBS = {"checkpoint", "create", "delete", "events", "exec", "kill", "list", "pause", "ps",
              "restore", "resume", "run", "spec", "start", "state", "update", "features"}
CRUN_EXTRA_VERBS = {"mounts"}
VERB_MODULE = {"create": "create", "run": "run", "start": "start", "state": "state",
               "kill": "kill", "delete": "delete", "features": "features",
               "doctor": "doctor", "list": "list", "spec": "spec", "ps": "ps", "exec": "exec"}



def flag_argv(flag: flags.Flag) -> list[str]:
    """The flag as an engine would pass it, with a plausible value."""
    if flag.value is None:
        return [flag.names[0]]
    value = {"int": "3", "choice": flag.choices[-1] if flag.choices else ""}.get(flag.kind)
    if flag.default is not None and flag.kind != "int":
        value = flag.default
    if flag.dest == "log_level":
        value = "debug"
    if flag.dest == "rootless":
        value = "true"
    if flag.dest == "preserve_fds":
        value = "0"  # any other count is refused (TestIgnoredFlagsLogged)
    return [flag.names[-1], value or "/tmp/x"]


def positional(verb: str) -> list[str]:
    args = flags.verb(verb).args
    return ["c1"] if "<container-id>" in args else []


class TestTableIsComplete:
    @pytest.mark.parametrize("runtime", sorted(UPSTREAM))
    def test_every_upstream_flag_in_table(self, runtime: str) -> None:
        """Every option runc 1.1, crun 1.8 and Slurm's scrun declare has a row."""
        missing = [f"{verb or '(global)'} {name}" for verb, names in UPSTREAM[runtime].items()
                   for name in sorted(names)
                   if not any(name in f.names for f in flags.verb_flags(verb))]
        assert [] == missing

    def test_every_runtime_verb_in_table(self) -> None:
        """Every runc/crun verb is a row: implemented, or refused as unsupported."""
        assert set() == (RUNC_VERBS | CRUN_EXTRA_VERBS) - {v.name for v in flags.VERBS}

    def test_flag_names_unique_per_verb(self) -> None:
        """No verb declares the same option name twice."""
        for verb in {f.verb for f in flags.FLAGS}:
            names = [n for f in flags.verb_flags(verb) for n in f.names]
            assert len(names) == len(set(names)), verb


class TestEveryFlagAccepted:
    @pytest.mark.parametrize("flag", [f for f in flags.FLAGS if f.verb == ""],
                             ids=lambda f: f.names[-1])
    def test_global(self, flag: flags.Flag, capsys: pytest.CaptureFixture[str]) -> None:
        """Each global option (with a value where it takes one) before `features` runs it."""
        if flag.dest == "slurm_conf":
            argv = ["-f", "/nonexistent/slurm.conf"]
        elif flag.kind == "count":
            argv = ["-v", "-v", "-v"]
        else:
            argv = flag_argv(flag)
        assert 0 == run([*argv, "features"])
        assert "ociVersionMax" in json.loads(capsys.readouterr().out)

    @pytest.mark.parametrize("flag", [f for f in flags.FLAGS
                                      if f.verb and f.effect != "default-only"],
                             ids=lambda f: f"{f.verb}{f.names[-1]}")
    def test_per_verb(self, flag: flags.Flag, tmp_path: Path) -> None:
        """Each verb option reaches the verb (its run function is called, exit 0)."""
        module = VERB_MODULE[flag.verb]
        target = "run_matching" if flag.dest == "regex" else "run"
        with mock.patch(f"scrun_py.commands.{module}.{target}", return_value=0) as verb:
            code = run(["--root", str(tmp_path), flag.verb, *flag_argv(flag),
                        *positional(flag.verb)])
        assert (0, 1) == (code, verb.call_count)

    @pytest.mark.parametrize("verb", ["create", "run"])
    def test_rootless_without_value(self, verb: str, tmp_path: Path) -> None:
        """`--rootless` right before the verb takes no value (podman's form)."""
        with mock.patch(f"scrun_py.commands.{verb}.run", return_value=0) as fn:
            assert 0 == run(["--rootless", "--root", str(tmp_path), verb, "c1"])
        assert 1 == fn.call_count


class TestIgnoredFlagsLogged:
    # --preserve-fds is only ever recorded as 0, which changes nothing: N > 0 is refused
    @pytest.mark.parametrize("flag", [f for f in flags.FLAGS if f.effect == "ignored"
                                      and f.dest != "preserve_fds"],
                             ids=lambda f: f"{f.verb}{f.names[-1]}")
    def test_debug_record(self, flag: flags.Flag, tmp_path: Path) -> None:
        """Each ignored flag leaves one debug record naming it in --log under --debug."""
        log = tmp_path / "log.json"
        argv = ["--debug", "--log", str(log), "--log-format", "json", "--root", str(tmp_path)]
        if flag.verb:
            module = VERB_MODULE[flag.verb]
            with mock.patch(f"scrun_py.commands.{module}.run", return_value=0):
                assert 0 == run([*argv, flag.verb, *flag_argv(flag), *positional(flag.verb)])
        else:
            assert 0 == run([*argv, *flag_argv(flag), "version"])
        records = [json.loads(line) for line in log.read_text().splitlines()]
        ignored = [r for r in records if r.get("flag") == flag.names[-1]]
        assert ["debug"] == [r["level"] for r in ignored]
        assert ignored[0]["msg"].endswith(f"{flag.names[-1]} ignored")

    def test_silent_by_default(self, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
        """Without a debug level nothing is printed for ignored flags (engines parse our
        combined output)."""
        assert 0 == run(["--systemd-cgroup", "--criu", "criu", "version"])
        assert "" == capsys.readouterr().err

    @pytest.mark.parametrize("verb", ["create", "run"])
    def test_preserve_fds_refused(self, tmp_path: Path, verb: str) -> None:
        """A non-zero --preserve-fds cannot be honoured: refused before the verb runs, one
        error record; 0 is accepted."""
        log = tmp_path / "log.json"
        with mock.patch(f"scrun_py.commands.{verb}.run") as verb_run:
            assert 1 == run(["--log", str(log), "--log-format", "json", verb,
                             "--preserve-fds", "2", "c1"])
            assert not verb_run.called
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [("error", f"{verb} --preserve-fds 2: file descriptors cannot follow the "
                 "container to a compute node")] == [(r["level"], r["msg"]) for r in records]
        with mock.patch(f"scrun_py.commands.{verb}.run", return_value=0):
            assert 0 == run([verb, "--preserve-fds", "0", "c1"])


class TestDefaultOnly:
    @pytest.mark.parametrize("verb", ["create", "run"])
    def test_default_accepted(self, verb: str) -> None:
        """crun's `--config config.json` (the default) is accepted."""
        with mock.patch(f"scrun_py.commands.{verb}.run", return_value=0) as fn:
            assert 0 == run([verb, "--config", "config.json", "c1"])
        assert 1 == fn.call_count

    @pytest.mark.parametrize("verb", ["create", "run"])
    def test_other_refused(self, verb: str, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
        """Another config file name is refused on one line, logged, verb not run."""
        log = tmp_path / "log.json"
        with mock.patch(f"scrun_py.commands.{verb}.run") as fn:
            code = run(["--log", str(log), "--log-format", "json", verb, "-f", "other.json",
                        "c1"])
        assert (2, 0) == (code, fn.call_count)
        err = capsys.readouterr().err
        assert f"scrun-py: {verb} --config other.json: only config.json is supported\n" == err
        assert "error" == json.loads(log.read_text())["level"]


class TestUsage:
    def test_global(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--usage` prints one line per supported verb (from the table), exit 0."""
        assert 0 == run(["--usage"])
        out = capsys.readouterr().out
        assert flags.usage_text("scrun-py") + "\n" == out
        for v in flags.VERBS:
            if v.supported:
                assert f"] {v.name}" in out or f" {v.name} " in out or out.endswith(v.name)

    @pytest.mark.parametrize("verb", [v.name for v in flags.VERBS if v.supported])
    def test_per_verb(self, verb: str, capsys: pytest.CaptureFixture[str]) -> None:
        """`VERB --usage` prints that verb's line with every option of the table."""
        assert 0 == run([verb, "--usage"])
        out = capsys.readouterr().out.strip()
        assert 1 == len(out.splitlines())
        assert f"[GLOBAL OPTIONS] {verb}" in out
        assert [] == [f.names[-1] for f in flags.verb_flags(verb) if f.names[-1] not in out]

    @pytest.mark.parametrize("opt", ["-h", "--help", "-?"])
    def test_help_aliases(self, opt: str, capsys: pytest.CaptureFixture[str]) -> None:
        """-h, --help and scrun's -? print the help, exit 0."""
        assert 0 == run([opt])
        assert "Run OCI containers as Slurm jobs" in capsys.readouterr().out


class TestVerbs:
    @pytest.mark.parametrize("verb", [v for v in flags.VERBS if v.supported],
                             ids=lambda v: v.name)
    def test_supported_has_help(self, verb: flags.Verb,
                                capsys: pytest.CaptureFixture[str]) -> None:
        """Each supported verb answers --help with the table's text."""
        assert 0 == run([verb.name, "--help"])
        assert verb.help.split(":")[0] in " ".join(capsys.readouterr().out.split())

    @pytest.mark.parametrize("verb", [v.name for v in flags.VERBS if not v.supported])
    def test_unsupported_refused(self, verb: str, capsys: pytest.CaptureFixture[str]) -> None:
        """Each runc/crun verb scrun-py lacks fails on one line, exit 1."""
        assert 1 == run([verb, "c1"])
        assert f"scrun-py: {verb} is not supported by scrun-py\n" == capsys.readouterr().err

    def test_state_all_is_not_a_flag(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`state --all` exists in neither runc nor crun (both refuse it): usage error."""
        assert 2 == run(["state", "--all", "c1"])
        assert 1 == len(capsys.readouterr().err.splitlines())


class TestKillAll:
    def test_help_says_what_the_code_does(self) -> None:
        """kill --all's help no longer promises that the whole job is signalled."""
        flag = next(f for f in flags.verb_flags("kill") if "--all" in f.names)
        assert "whole job" not in flag.help
        assert "init process" in flag.help
        assert "ignored" == flag.effect

    def test_help_output(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`kill --help` shows --all with the table's text (ignored flags are listed too)."""
        assert 0 == run(["kill", "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "-a, --all (accepted and ignored, as in Slurm's scrun: the signal goes to the " \
               "container's init process through oci.conf RunTimeKill" in out

    def test_all_does_not_change_the_call(self, tmp_path: Path) -> None:
        """With or without --all, kill.run gets the same arguments."""
        calls: list[Any] = []
        for extra in ([], ["--all"], ["-a"]):
            with mock.patch("scrun_py.commands.kill.run") as fn:
                assert 0 == run(["--root", str(tmp_path), "kill", *extra, "c1", "KILL"])
            calls.append(fn.call_args.args[1:])
        assert [("c1", "KILL")] * 3 == calls


class TestRegex:
    @pytest.mark.parametrize(("verb", "extra"), [("kill", ["USR1"]), ("delete", [])])
    def test_matching_containers(self, verb: str, extra: list[str], tmp_path: Path) -> None:
        """crun's --regex applies the verb to every id the expression matches."""
        for name in ("web-1", "web-2", "db-1"):
            (tmp_path / name).mkdir()
        with mock.patch(f"scrun_py.commands.{verb}.run") as fn:
            assert 0 == run(["--root", str(tmp_path), verb, "--regex", "^web-", *extra])
        assert ["web-1", "web-2"] == [c.args[1] for c in fn.call_args_list]

    @pytest.mark.parametrize("verb", ["kill", "delete"])
    def test_failure_is_a_warning(self, verb: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
        """A matching id that fails (no state) is a warning; the command succeeds."""
        (tmp_path / "web-1").mkdir()
        (tmp_path / "web-1" / "anchor.sock").write_text("")
        assert 0 == run(["--log-level", "warning", "--root", str(tmp_path), verb, "-r",
                         "web"])
        err = capsys.readouterr().err
        assert f"{verb} web-1: container does not exist" in err

    def test_invalid_regex(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad expression fails on one line."""
        assert 1 == run(["--root", str(tmp_path), "kill", "--regex", "(", "TERM"])
        err = capsys.readouterr().err
        assert 1 == len(err.splitlines())
        assert "invalid regular expression" in err


class TestClickBuiltFromTable:
    @pytest.mark.parametrize("verb", ["", *sorted({f.verb for f in flags.FLAGS if f.verb})])
    def test_options_match_table(self, verb: str) -> None:
        """The click command's options are exactly the table's (+ --usage, help)."""
        cmd: click.Command = click_app.scrun if not verb else click_app.scrun.commands[verb]
        declared = {n for p in cmd.params if isinstance(p, click.Option) for n in p.opts}
        expected = {n for f in flags.verb_flags(verb) for n in f.names} | {"--usage"}
        if not verb:
            expected |= {"-V", "--version"}
        assert expected == declared


class TestLogDestination:
    def test_file_prefix(self, tmp_path: Path) -> None:
        """crun's `--log file:PATH` writes to PATH (click path and fast path)."""
        log = tmp_path / "log.json"
        assert 1 == run(["--log", f"file:{log}", "--log-format", "json", "--root",
                         str(tmp_path), "state", "nope"])
        assert "container does not exist" == json.loads(log.read_text())["msg"]

    @pytest.mark.parametrize("value", ["syslog:scrun", "journald:scrun"])
    def test_other_destinations_refused(self, value: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
        """crun's syslog:/journald: destinations fail on one line naming the way to
        syslog, instead of writing a file with that name."""
        assert 1 == run(["--log", value, "--root", str(tmp_path), "state", "nope"])
        assert [f"scrun-py: --log {value}: only a file ([file:]PATH) is supported; for "
                "syslog use SCRUN_SYSLOG_DEBUG"] == capsys.readouterr().err.splitlines()
        assert [] == [p for p in tmp_path.iterdir() if ":" in p.name]
