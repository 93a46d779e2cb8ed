"""Unit tests for scrun_py.cli.click_app: global options, verbs that need no container,
the fatal path.

Everything runs in-process through `click_app.main(argv)`; nothing here starts an anchor
or talks to Slurm.  mock.patch is used only for the wiring tests at the end.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from unittest import mock

import pytest

from scrun_py import OCI_SPEC_VERSION, __version__
from scrun_py.base import procs
from scrun_py.base.invocation import Invocation
from scrun_py.commands.create import CreateArgs
from scrun_py.container import spool
from tests.unit.cli_run import run, stored

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
LOGRUS_TEXT = re.compile(r'^time="(?P<time>[^"]+)" level=(?P<level>\w+) msg="(?P<msg>.*)"$')
# Above the kernel's PID_MAX_LIMIT (4194304): no process can ever have this pid.
IMPOSSIBLE_PID = 4_194_305
UNSUPPORTED = ["pause", "resume", "update", "checkpoint", "restore", "events"]




class TestVersion:
    @pytest.mark.parametrize("argv", [["--version"], ["-V"], ["-v"], ["version"], ["-v", "-v"]])
    def test_prints_runc_style_version(self, argv: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
        """--version, -V, a lone -v and the `version` verb print runc's lines: version,
        commit, spec, then python and slurm where runc has go and libseccomp."""
        assert 0 == run(argv)
        out = capsys.readouterr()
        lines = out.out.splitlines()
        assert ["scrun-py version", "commit:", "spec:", "python:", "slurm:"] == [
            line.rpartition(" ")[0] for line in lines]
        assert f"scrun-py version {__version__}" == lines[0]
        assert f"spec: {OCI_SPEC_VERSION}" == lines[2]
        assert "" == out.err

    def test_version_wins_over_verb(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--version is eager: it prints and exits before the verb runs."""
        assert 0 == run(["--version", "state", "c1"])
        assert capsys.readouterr().out.startswith("scrun-py version ")


class TestUsage:
    def test_no_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without a command scrun-py prints its help on stdout and exits 0, as runc."""
        assert 0 == run([])
        out = capsys.readouterr()
        assert out.out.startswith("Usage: scrun-py [OPTIONS] [COMMAND] [ARGS]...")
        assert "" == out.err

    def test_unknown_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown verb is a usage error (exit 2)."""
        assert 2 == run(["frobnicate"])
        assert "frobnicate" in capsys.readouterr().err

    @pytest.mark.parametrize("verb", UNSUPPORTED)
    def test_unsupported_verb(self, verb: str, capsys: pytest.CaptureFixture[str]) -> None:
        """Each runc verb scrun-py does not implement fails with a clear message."""
        assert 1 == run([verb])
        err = capsys.readouterr().err
        assert f"scrun-py: {verb} is not supported by scrun-py\n" == err

    @pytest.mark.parametrize("verb", ["pause", "update"])
    def test_unsupported_verb_with_arguments(self, verb: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
        """Unsupported verbs give the same message whatever options follow them."""
        assert 1 == run([verb, "--tty", "--format", "json", "c1", "ls"])
        assert "not supported by scrun-py" in capsys.readouterr().err


class TestIgnoredGlobalFlags:
    @pytest.mark.parametrize("flags", [
        ["--rootless"], ["--rootless", "true"], ["--rootless", "false"], ["--rootless", "auto"],
        ["--rootless=true"], ["--systemd-cgroup"], ["--cgroup-manager", "x"],
        ["--cgroup-manager=systemd"],
        ["--rootless", "--systemd-cgroup", "--cgroup-manager", "cgroupfs"],
    ])
    def test_accepted_before_verb(self, flags: list[str],
                                  capsys: pytest.CaptureFixture[str]) -> None:
        """Global flags that engines pass (Slurm's scrun ignores them) are accepted."""
        assert 0 == run([*flags, "features"])
        assert "ociVersionMax" in json.loads(capsys.readouterr().out)


class TestFeatures:
    def test_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`features` prints a JSON object with the supported OCI version range."""
        assert 0 == run(["features"])
        features = json.loads(capsys.readouterr().out)
        assert ("1.0.0", OCI_SPEC_VERSION) == (features["ociVersionMin"],
                                               features["ociVersionMax"])


class TestFatalPath:
    def test_state_unknown_id_json_log(self, tmp_root: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown id exits 1, prints one line, and appends one {level,msg,time} record."""
        log = tmp_root.parent / "log.json"
        log.write_text('{"level":"info","msg":"earlier","time":"2024-01-01T00:00:00Z"}\n')
        code = run(["--root", str(tmp_root), "--log", str(log), "--log-format", "json",
                    "state", "nope"])
        assert 1 == code
        out = capsys.readouterr()
        assert "" == out.out
        assert 1 == len(out.err.splitlines())
        assert "container does not exist" in out.err
        lines = log.read_text().splitlines()
        assert 2 == len(lines)
        assert "earlier" == json.loads(lines[0])["msg"]
        record = json.loads(lines[1])
        assert {"level", "msg", "time"} == set(record)
        assert ("error", "container does not exist") == (record["level"], record["msg"])
        assert RFC3339.match(record["time"])
        datetime.fromisoformat(record["time"])

    def test_log_format_equals_form(self, tmp_root: Path) -> None:
        """`--log=PATH --log-format=json` reach the fatal path as well."""
        log = tmp_root.parent / "log.json"
        assert 1 == run([f"--root={tmp_root}", f"--log={log}", "--log-format=json",
                         "state", "nope"])
        assert "container does not exist" == json.loads(log.read_text())["msg"]

    def test_text_log(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--log-format text writes a logrus-style `time=… level=error msg=…` line."""
        log = tmp_root.parent / "log.txt"
        assert 1 == run(["--root", str(tmp_root), "--log", str(log), "--log-format", "text",
                         "state", "nope"])
        lines = log.read_text().splitlines()
        assert 1 == len(lines)
        match = LOGRUS_TEXT.match(lines[0])
        assert match is not None
        assert ("error", "container does not exist") == (match["level"], match["msg"])
        assert RFC3339.match(match["time"])
        assert 1 == len(capsys.readouterr().err.splitlines())

    def test_default_log_format_is_text(self, tmp_root: Path) -> None:
        """Without --log-format the --log record is text."""
        log = tmp_root.parent / "log.txt"
        assert 1 == run(["--root", str(tmp_root), "--log", str(log), "state", "nope"])
        assert LOGRUS_TEXT.match(log.read_text().strip())

    def test_bad_log_format_is_usage_error(self, tmp_root: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
        """--log-format xml exits 2 and is still logged (as text) to --log."""
        log = tmp_root.parent / "log.xml"
        assert 2 == run(["--root", str(tmp_root), "--log", str(log), "--log-format", "xml",
                         "state", "nope"])
        err = capsys.readouterr().err
        assert 1 == len(err.splitlines())
        assert "xml" in err
        match = LOGRUS_TEXT.match(log.read_text().strip())
        assert match is not None
        assert "error" == match["level"]
        assert "xml" in match["msg"]

    def test_no_log_file_without_log(self, tmp_root: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
        """Without --log only stderr gets the message."""
        assert 1 == run(["--root", str(tmp_root), "state", "nope"])
        assert "scrun-py: container does not exist\n" == capsys.readouterr().err
        assert [] == list(tmp_root.parent.glob("log*"))

    def test_invalid_id(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A malformed id fails with runc's `invalid container ID format`."""
        assert 1 == run(["--root", str(tmp_root), "state", "../x"])
        assert "invalid container ID format" in capsys.readouterr().err


class TestVerbsOnUnknownContainer:
    def test_kill_unknown(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """kill of an unknown id fails with `container does not exist`."""
        assert 1 == run(["--root", str(tmp_root), "kill", "nope"])
        assert "container does not exist" in capsys.readouterr().err

    def test_kill_unknown_signal(self, tmp_root: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
        """kill with a bogus signal name fails with `unknown signal`."""
        assert 0 != run(["--root", str(tmp_root), "kill", "nope", "BOGUS"])
        assert "unknown signal" in capsys.readouterr().err

    def test_delete_unknown(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """delete of an unknown id fails with `container does not exist`."""
        assert 1 == run(["--root", str(tmp_root), "delete", "nope"])
        assert "container does not exist" in capsys.readouterr().err

    def test_force_delete_unknown(self, tmp_root: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
        """delete --force of an unknown id succeeds silently."""
        assert 0 == run(["--root", str(tmp_root), "delete", "--force", "nope"])
        assert ("", "") == tuple(capsys.readouterr())

    def test_start_unknown(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """start of an unknown id fails with `container does not exist`."""
        assert 1 == run(["--root", str(tmp_root), "start", "nope"])
        assert "container does not exist" in capsys.readouterr().err



class TestStoredContainer:
    def test_state_dead_anchor(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`state` of a record whose anchor is gone prints one line: stopped, pid 0."""
        stored(tmp_root, "running", IMPOSSIBLE_PID)
        assert 0 == run(["--root", str(tmp_root), "state", "c1"])
        out = capsys.readouterr().out
        assert 1 == len(out.splitlines())
        doc = json.loads(out)
        assert ("c1", "stopped", 0, "/b/c1") == (doc["id"], doc["status"], doc["pid"],
                                                 doc["bundle"])

    def test_state_live_anchor(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`state` of a record whose anchor (this process) is alive shows status and pid."""
        pid = os.getpid()
        stored(tmp_root, "created", pid, anchor_start=procs.process_start_time(pid))
        assert 0 == run(["--root", str(tmp_root), "state", "c1"])
        doc = json.loads(capsys.readouterr().out)
        assert ("created", pid) == (doc["status"], doc["pid"])

    def test_state_corrupt_record(self, tmp_root: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
        """A corrupt state.json fails with one line naming the file, not a traceback."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        (cdir / spool.STATE_FILE).write_text("[]")
        assert 1 == run(["--root", str(tmp_root), "state", "c1"])
        assert "corrupt container state file" in capsys.readouterr().err

    def test_delete_stopped(self, tmp_root: Path) -> None:
        """delete of a stopped container removes its dir and the pid file that names its anchor."""
        pid_file = tmp_root.parent / "c1.pid"
        spool.write_pid_file(pid_file, IMPOSSIBLE_PID)
        cdir = stored(tmp_root, "stopped", IMPOSSIBLE_PID, pid_file=str(pid_file))
        assert 0 == run(["--root", str(tmp_root), "delete", "c1"])
        assert (False, False) == (cdir.exists(), pid_file.exists())

    def test_delete_keeps_foreign_pid_file(self, tmp_root: Path) -> None:
        """delete leaves a pid file that now names some other process."""
        pid_file = tmp_root.parent / "c1.pid"
        spool.write_pid_file(pid_file, 1)
        stored(tmp_root, "stopped", IMPOSSIBLE_PID, pid_file=str(pid_file))
        assert 0 == run(["--root", str(tmp_root), "delete", "c1"])
        assert b"1" == pid_file.read_bytes()

    def test_delete_half_created(self, tmp_root: Path) -> None:
        """A container dir without state.json or socket is cleaned up by a plain delete."""
        cdir = Path(spool.make_container_dir(tmp_root, "c1"))
        assert 0 == run(["--root", str(tmp_root), "delete", "c1"])
        assert cdir.exists() is False

    def test_start_stopped(self, tmp_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """start of a container whose anchor is gone fails with runc's wording."""
        stored(tmp_root, "created", IMPOSSIBLE_PID)
        assert 1 == run(["--root", str(tmp_root), "start", "c1"])
        assert "cannot start a container that has stopped" in capsys.readouterr().err


class TestWiring:
    def test_state_gets_invocation(self, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
        """Global options become the verb's Invocation, with --root made absolute."""
        monkeypatch.chdir(tmp_path)
        with mock.patch("scrun_py.commands.state.run") as verb:
            assert 0 == run(["--root", "rel", "--log", "l.json", "--log-format", "json",
                             "--debug", "state", "c1"])
        inv, container_id = verb.call_args.args
        assert (str(tmp_path / "rel"), "l.json", "json", True, "c1") == (
            inv.root_dir, inv.log_name, inv.log_format, inv.debug, container_id)

    def test_kill_arguments(self, tmp_root: Path) -> None:
        """kill passes the id and the raw signal text; --all is accepted."""
        with mock.patch("scrun_py.commands.kill.run") as verb:
            assert 0 == run(["--root", str(tmp_root), "kill", "--all", "c1", "KILL"])
        assert (Invocation, "c1", "KILL") == (
            type(verb.call_args.args[0]), *verb.call_args.args[1:])

    def test_kill_default_signal(self, tmp_root: Path) -> None:
        """kill without a signal passes None (the verb defaults to TERM)."""
        with mock.patch("scrun_py.commands.kill.run") as verb:
            assert 0 == run(["--root", str(tmp_root), "kill", "c1"])
        assert ("c1", None) == verb.call_args.args[1:]

    def test_delete_force(self, tmp_root: Path) -> None:
        """delete -f passes force=True."""
        with mock.patch("scrun_py.commands.delete.run") as verb:
            assert 0 == run(["--root", str(tmp_root), "delete", "-f", "c1"])
        assert ("c1", True) == verb.call_args.args[1:]

    @pytest.mark.parametrize("ignored", [["--no-pivot"], ["--no-new-keyring"],
                                         ["--preserve-fds", "0"], ["--pidfd-socket", "/s"]])
    def test_create_ignored_flags(self, tmp_root: Path, ignored: list[str]) -> None:
        """create accepts runc's flags that scrun-py ignores, and passes its own through."""
        with mock.patch("scrun_py.commands.create.run") as verb:
            assert 0 == run(["--root", str(tmp_root), "create", *ignored, "--bundle", "/b",
                             "--pid-file", "/p", "--console-socket", "/c", "c1"])
        assert (CreateArgs("c1", "/b", "/p", "/c"), None) == verb.call_args.args[1:]

    def test_internal_error_is_one_line(self, tmp_root: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
        """An unexpected exception becomes one `internal error` line and exit 1, no traceback."""
        log = tmp_root.parent / "log.json"
        with mock.patch("scrun_py.commands.state.run", side_effect=RuntimeError("boom\nmore")):
            assert 1 == run(["--root", str(tmp_root), "--log", str(log), "--log-format", "json",
                             "state", "c1"])
        err = capsys.readouterr().err
        assert 1 == len(err.splitlines())
        assert "internal error" in err
        assert "error" == json.loads(log.read_text())["level"]
