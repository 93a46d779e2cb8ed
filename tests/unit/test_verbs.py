"""Every verb's success and error cases through both entries: the click-free one
(fast_path.parse + fast_path.run, what the console script runs for these command lines)
and click's (click_app.main), with plain and with diagnostics settings.  Each case runs
through every combination and must give the same exit status, stdout, stderr, --log
records and files left behind: a drift between the two entries fails here."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import ContainerStillRunning, ScrunError
from scrun_py.cli import click_app, fast_path
from scrun_py.commands import delete
from scrun_py.container import protocol, spool
from tests.unit.cli_run import stored

ME = os.getpid()
GONE = 2 ** 22 + 1  # above pid_max: no such process


def _click(argv: list[str]) -> int:
    try:
        click_app.main(argv)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    raise AssertionError("click_app.main returned")


def _no_click(argv: list[str]) -> int:
    call = fast_path.parse(argv)
    assert call is not None, f"fast_path.parse gave {argv} up to click"
    return fast_path.run(argv, call)


ENTRIES: dict[str, Callable[[list[str]], int]] = {"click": _click, "no-click": _no_click}
SETTINGS: dict[str, dict[str, str]] = {"plain": {}, "diagnostic": {"SCRUN_FILE_DEBUG": "debug"}}


class Outcome:
    def __init__(self, code: int, out: str, err: str, records: list[dict[str, object]],
                 left: list[str]) -> None:
        self.fields = (code, out, err, records, left)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and self.fields == other.fields

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Outcome{self.fields!r}"


class Anchor:
    """A stand-in anchor on a container's control socket: answers each request with the
    next of `replies` (None: hangs up) and keeps what it was sent."""

    def __init__(self, cdir: Path, replies: list[bytes | None]) -> None:
        self.listener = socket.socket(fileno=spool.bind(cdir).detach())
        self.replies = replies
        self.got: list[dict[str, object]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with self.listener:
            for reply in self.replies:
                conn, _ = self.listener.accept()
                with conn:
                    self.got.append(protocol.decode(protocol.read_line(conn)))
                    if reply is not None:
                        conn.sendall(reply)


Setup = Callable[[Path], object]


def run_case(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
             entry: str, setting: str, argv: list[str], setup: Setup) -> tuple[Outcome, object]:
    """Run `argv` (after --root ROOT --log LOG --log-format json) on a fresh root."""
    root.mkdir()
    for key in [k for k in os.environ if k.startswith("SCRUN_")]:
        monkeypatch.delenv(key)
    for key, value in SETTINGS[setting].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(delete, "ANCHOR_EXIT_WAIT_S", 0.0)
    made = setup(root)
    log = root.parent / f"{root.name}.log"
    capsys.readouterr()
    code = ENTRIES[entry](["--root", str(root), "--log", str(log), "--log-format", "json",
                           *argv])
    out, err = capsys.readouterr()
    text = log.read_text().replace(str(root), "ROOT") if log.exists() else ""
    records = [{k: v for k, v in json.loads(line).items() if k != "time"}
               for line in text.splitlines()]
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    return Outcome(code, out.replace(str(root), "ROOT"), err.replace(str(root), "ROOT"),
                   records, left), made


@pytest.fixture(params=[(e, s) for e in ENTRIES for s in SETTINGS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def entry(request: pytest.FixtureRequest) -> tuple[str, str]:
    param: tuple[str, str] = request.param
    return param


@pytest.fixture
def both(tmp_path: Path, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch,
         entry: tuple[str, str]) -> Iterator[Callable[[list[str], Setup], tuple[Outcome, object]]]:
    """Run a case through `entry` and, as the reference, through click with plain
    settings; assert both give the same Outcome; return it and what setup made."""
    count = iter(range(1000))

    def check(argv: list[str], setup: Setup) -> tuple[Outcome, object]:
        n = next(count)
        reference, _ = run_case(tmp_path / f"ref{n}", capsys, monkeypatch, "click", entry[1],
                                argv, setup)
        got, made = run_case(tmp_path / f"got{n}", capsys, monkeypatch, entry[0], entry[1],
                             argv, setup)
        assert reference == got
        return got, made

    yield check


def _stopped(root: Path) -> None:
    stored(root, "stopped", 0, exit_code=0, annotations={"a": "b"})


def _running(root: Path) -> None:
    stored(root, "running", ME, anchor_start=procs.process_start_time(ME))


def _created_answering(*replies: bytes | None) -> Setup:
    def setup(root: Path) -> Anchor:
        cdir = stored(root, "created", ME, anchor_start=procs.process_start_time(ME))
        return Anchor(cdir, list(replies))
    return setup


def _running_answering(*replies: bytes | None) -> Setup:
    def setup(root: Path) -> Anchor:
        cdir = stored(root, "running", ME, anchor_start=procs.process_start_time(ME))
        return Anchor(cdir, list(replies))
    return setup


def _nothing(root: Path) -> None:
    return None


def _half_created(root: Path) -> None:
    Path(spool.make_container_dir(root, "c1"))


def _corrupt(root: Path) -> None:
    (Path(spool.make_container_dir(root, "c1")) / spool.STATE_FILE).write_text('{"id": 3}')


def _err(message: str) -> str:
    return f"scrun-py: {message}\n"


def _error_record(message: str) -> dict[str, object]:
    return {"level": "error", "msg": message}


class TestState:
    def test_stopped(self, both: Callable[..., tuple[Outcome, object]]) -> None:
        got, _ = both(["state", "c1"], _stopped)
        code, out, err, _, _ = got.fields
        assert (0, "") == (code, err)
        assert {"status": "stopped", "pid": 0, "annotations": {"a": "b"}}.items() <= \
            json.loads(out).items()

    def test_running_with_a_live_anchor(self, both: Callable[..., tuple[Outcome, object]]) -> None:
        got, _ = both(["state", "c1"], _running)
        assert ("running", ME) == (json.loads(got.fields[1])["status"],
                                   json.loads(got.fields[1])["pid"])

    @pytest.mark.parametrize(("setup", "message"), [
        (_nothing, "container does not exist"),
        (_corrupt, "corrupt container state file: ROOT/c1/state.json"),
    ])
    def test_errors(self, both: Callable[..., tuple[Outcome, object]], setup: Setup,
                    message: str) -> None:
        got, _ = both(["state", "c1"], setup)
        code, out, err, records, _ = got.fields
        assert (1, "", _err(message)) == (code, out, err)
        assert [_error_record(message).items() <= r.items() for r in records] == [True]

    def test_invalid_id(self, both: Callable[..., tuple[Outcome, object]]) -> None:
        got, _ = both(["state", "c:1"], _nothing)
        assert (1, _err("invalid container ID format: only letters, digits, '_', '+', '-' "
                        "and '.' are allowed")) == (got.fields[0], got.fields[2])


class TestStart:
    def test_created_is_started(self, both: Callable[..., tuple[Outcome, object]]) -> None:
        got, anchor = both(["start", "c1"], _created_answering(protocol.encode_ok(job_id=5)))
        assert (0, "", "") == got.fields[:3]
        assert isinstance(anchor, Anchor)
        anchor.thread.join(5)
        assert [{"v": 1, "type": "start"}] == anchor.got

    @pytest.mark.parametrize(("setup", "message"), [
        (_stopped, "cannot start a container that has stopped"),
        (_running, "cannot start an already running container"),
        (_nothing, "container does not exist"),
        (_created_answering(None), "cannot start a container that has stopped"),
        (_created_answering(b"nonsense\n"), "malformed control message"),
        (_created_answering(protocol.encode_error(ScrunError("staging failed: x"))),
         "staging failed: x"),
    ])
    def test_errors(self, both: Callable[..., tuple[Outcome, object]], setup: Setup,
                    message: str) -> None:
        got, _ = both(["start", "c1"], setup)
        assert (1, "", _err(message)) == got.fields[:3]


class TestKill:
    def test_signal_goes_to_the_anchor(self, both: Callable[..., tuple[Outcome, object]]) -> None:
        got, anchor = both(["kill", "c1", "KILL"], _running_answering(protocol.encode_ok()))
        assert (0, "", "") == got.fields[:3]
        assert isinstance(anchor, Anchor)
        anchor.thread.join(5)
        assert [{"v": 1, "type": "kill", "signal": 9}] == anchor.got

    @pytest.mark.parametrize(("argv", "setup", "message"), [
        (["kill", "c1"], _stopped, "container not running"),
        (["kill", "c1"], _nothing, "container does not exist"),
        (["kill", "c1", "NOPE"], _running, "unknown signal 'NOPE'"),
        (["kill", "c1"], _running_answering(None), "container not running"),
    ])
    def test_errors(self, both: Callable[..., tuple[Outcome, object]], argv: list[str],
                    setup: Setup, message: str) -> None:
        got, _ = both(argv, setup)
        assert (1, "", _err(message)) == got.fields[:3]

    def test_regex_with_nothing_to_match(self, both: Callable[..., tuple[Outcome, object]]
                                         ) -> None:
        got, _ = both(["kill", "--regex", "c.*"], _nothing)
        assert (0, "", "") == got.fields[:3]


class TestDelete:
    @pytest.mark.parametrize("setup", [_stopped, _half_created])
    @pytest.mark.parametrize("force", [[], ["--force"], ["-f"]])
    def test_removed(self, both: Callable[..., tuple[Outcome, object]], setup: Setup,
                     force: list[str]) -> None:
        got, _ = both(["delete", *force, "c1"], setup)
        assert (0, "", "", []) == (got.fields[0], got.fields[1], got.fields[2], got.fields[4])

    def test_gone(self, both: Callable[..., tuple[Outcome, object]]) -> None:
        assert (1, _err("container does not exist")) == (
            both(["delete", "c1"], _nothing)[0].fields[0],
            both(["delete", "c1"], _nothing)[0].fields[2])
        assert 0 == both(["delete", "--force", "c1"], _nothing)[0].fields[0]

    def test_running_refused_by_the_anchor(self, both: Callable[..., tuple[Outcome, object]]
                                           ) -> None:
        refusal = protocol.encode_error(ContainerStillRunning("c1"))
        got, anchor = both(["delete", "c1"], _running_answering(refusal))
        assert (1, _err("cannot delete container c1 that is not stopped: running")) == (
            got.fields[0], got.fields[2])
        assert ["c1", "c1/anchor.sock", "c1/state.json"] == got.fields[4]
        assert isinstance(anchor, Anchor)
        anchor.thread.join(5)
        assert [{"v": 1, "type": "delete", "force": False}] == anchor.got

    def test_ignored_flag_is_noted(self, both: Callable[..., tuple[Outcome, object]],
                                   entry: tuple[str, str]) -> None:
        """--systemd-cgroup changes nothing: a debug record where debug is on."""
        got, _ = both(["--systemd-cgroup", "delete", "--force", "ghost"], _nothing)
        expected = ([{"level": "debug", "msg": "--systemd-cgroup ignored",
                      "flag": "--systemd-cgroup", "value": True}]
                    if entry[1] == "diagnostic" else [])
        assert (0, expected) == (got.fields[0], got.fields[3])


class TestCreate:
    """Create's failures before the anchor is handed its spec (the early anchor is not
    forked here: tests/unit/test_launch.py runs that through the console script)."""

    @pytest.fixture(autouse=True)
    def no_early_anchor(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from scrun_py.anchor.launch import EarlyAnchor

        monkeypatch.setattr(EarlyAnchor, "fork", classmethod(lambda cls, conf: None))

    @pytest.mark.parametrize(("argv", "code", "message"), [
        (["create", "--bundle", "/nonexistent/b", "c1"], 1,
         "bundle /nonexistent/b: not a directory"),
        (["create", "-f", "other.json", "c1"], 2,
         "create --config other.json: only config.json is supported"),
        (["create", "--bundle", "/b", "c/1"], 1,
         "invalid container ID format: only letters, digits, '_', '+', '-' and '.' are "
         "allowed"),
    ])
    def test_errors(self, both: Callable[..., tuple[Outcome, object]], argv: list[str],
                    code: int, message: str) -> None:
        got, _ = both(argv, _nothing)
        assert (code, "", _err(message)) == got.fields[:3]


class TestParser:
    """What the click-free parser reads and what it leaves to click."""

    @pytest.mark.parametrize(("argv", "verb", "globals_", "options", "args"), [
        (["state", "c1"], "state", {}, {}, ["c1"]),
        (["--root=/r", "--log", "/l", "--log-format=json", "state", "c1"], "state",
         {"root": "/r", "log_path": "/l", "log_format": "json"}, {}, ["c1"]),
        (["-f", "/c", "--systemd-cgroup", "delete", "-f", "c1"], "delete",
         {"slurm_conf": "/c", "systemd_cgroup": True}, {"force": True}, ["c1"]),
        (["--rootless", "create", "c1", "--bundle", "/b"], "create", {"rootless": "auto"},
         {"bundle": "/b"}, ["c1"]),
        (["--rootless", "true", "-v", "-v", "kill", "c1", "9"], "kill",
         {"rootless": "true", "verbosity": 2}, {}, ["c1", "9"]),
        (["create", "--preserve-fds=3", "--", "-c1"], "create", {}, {"preserve_fds": 3},
         ["-c1"]),
    ])
    def test_reads(self, argv: list[str], verb: str, globals_: dict[str, object],
                   options: dict[str, object], args: list[str]) -> None:
        call = fast_path.parse(argv)
        assert call is not None
        assert (verb, globals_, options, args) == (call.verb, call.globals, call.options,
                                                   call.args)

    @pytest.mark.parametrize("argv", [
        [], ["--help"], ["state", "--help"], ["--usage"], ["--version", "state", "c1"],
        ["state"], ["state", "a", "b"], ["kill", "a", "b", "c"], ["run", "c1"],
        ["features"], ["exec", "c1"], ["--log-format", "xml", "state", "c1"],
        ["--root"], ["--debug=1", "state", "c1"], ["create", "--preserve-fds", "x", "c1"],
        ["start", "--force", "c1"], ["--bogus", "state", "c1"],
    ])
    def test_leaves_to_click(self, argv: list[str]) -> None:
        assert None is fast_path.parse(argv)

    def test_table_is_what_flags_generates(self) -> None:
        """scrun_py/cli/argv_table.py is what argv_table_gen writes from base/flags.py."""
        from scrun_py.cli.argv_table_gen import render_argv_table

        table = Path(__file__).resolve().parents[2] / "scrun_py" / "cli" / "argv_table.py"
        assert render_argv_table() + "\n" == table.read_text()


class TestUnexpectedFailures:
    """What nobody expected ends as every error does: one line on stderr, one record in
    --log, no traceback; Ctrl-C is `interrupted` and exit status 130."""

    @pytest.mark.parametrize("argv", [["state", "c1"], ["start", "c1"], ["delete", "c1"],
                                      ["delete", "--force", "c1"], ["kill", "c1"]])
    def test_state_json_is_a_directory(self, both: Callable[..., tuple[Outcome, object]],
                                       argv: list[str]) -> None:
        def setup(root: Path) -> Path:
            (root / "c1" / spool.STATE_FILE).mkdir(parents=True)
            return root

        got, root = both(argv, setup)
        code, out, err, records, _ = got.fields
        assert (1, "") == (code, out)
        assert err.startswith("scrun-py: container state file ")
        assert err.rstrip().endswith("is not a regular file: refusing it")
        assert isinstance(root, Path)
        assert (root / "c1" / spool.STATE_FILE).is_dir()  # nothing removed
        assert 1 == len(err.splitlines())
        assert [("error", err.strip().removeprefix("scrun-py: "))] == [
            (r["level"], r["msg"]) for r in records]

    @pytest.mark.parametrize(("raised", "code", "message"), [
        (RuntimeError("boom"), 1, "internal error: RuntimeError('boom')"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ])
    def test_raised_by_the_verb(self, both: Callable[..., tuple[Outcome, object]],
                                monkeypatch: pytest.MonkeyPatch, raised: BaseException,
                                code: int, message: str) -> None:
        from scrun_py.commands import state

        def boom(*_args: object) -> None:
            raise raised

        monkeypatch.setattr(state, "run", boom)
        got, _ = both(["state", "c1"], _stopped)
        assert (code, "", _err(message)) == got.fields[:3]


def test_version_is_clicks() -> None:
    """`--version` (answered before any parsing) prints what click's `version` prints."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "scrun_py", *args], capture_output=True,
                              text=True, timeout=60, check=False)

    fast, slow = run("--version"), run("--debug", "version")
    assert (0, slow.stdout) == (fast.returncode, fast.stdout)
    assert 5 == len(fast.stdout.splitlines())


class TestConsoleScript:
    """entry.main: `--version` first, then the click-free path or click, each ending
    with os._exit (stood in for here by SystemExit)."""

    @pytest.fixture(autouse=True)
    def exit_raises(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def fake_exit(code: int) -> None:
            raise SystemExit(code)

        monkeypatch.setattr(os, "_exit", fake_exit)

    def _main(self, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
        from scrun_py import entry

        monkeypatch.setattr("sys.argv", ["scrun-py", *argv])
        with pytest.raises(SystemExit) as info:
            entry.main()
        assert isinstance(info.value.code, int)
        return info.value.code

    def test_version(self, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == self._main(monkeypatch, "-v")
        assert capsys.readouterr().out.startswith("scrun-py version ")

    @pytest.mark.parametrize(("argv", "clicked"), [
        (["state", "c1"], False), (["--debug", "state", "c1"], False),
        (["state", "--help"], True), (["features"], True)])
    def test_click_only_when_the_parser_gives_up(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str], argv: list[str], clicked: bool) -> None:
        stored(tmp_path, "stopped", 0)
        used: list[list[str]] = []
        real = click_app.main

        def spy(args: list[str]) -> None:
            used.append(args)
            real(args)

        monkeypatch.setattr(click_app, "main", spy)
        assert 0 == self._main(monkeypatch, "--root", str(tmp_path), *argv)
        assert clicked == bool(used)
        out = capsys.readouterr().out
        if argv[-1] == "c1":
            assert "stopped" == json.loads(out)["status"]


def test_default_levels_log_no_debug() -> None:
    """Invocation.note skips a debug record without resolving the levels when no
    diagnostics setting was given: the default levels must indeed log none."""
    from scrun_py.base import flags
    from scrun_py.base.invocation import Invocation

    debug = flags.level("debug").number
    assert all(flags.level(word).number > debug for word in flags.DEFAULT_LEVELS.values())
    inv = Invocation.resolve(root="/r", environ={})
    assert all(level > debug for level in inv.levels)
