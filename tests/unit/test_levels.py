"""The diagnostics ladder of scrun(1), from every place a level can be set.

quiet, fatal, error, info, verbose, debug, debug2..debug5: SCRUN_DEBUG,
SCRUN_STDERR_DEBUG, SCRUN_FILE_DEBUG, SCRUN_SYSLOG_DEBUG, --log-level, --debug, -v and
oci.conf StdIODebug/FileDebug/SyslogDebug.  The rows come from flags.LEVEL_SOURCES.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from scrun_py.base import flags, logs
from scrun_py.base.errors import ConfigError
from scrun_py.site.oci_conf import parse_oci_conf
from tests.unit.cli_run import run

LADDER = list(flags.LADDER)
DEFAULT = {"stderr": logs.LEVELS["error"], "file": logs.LEVELS["info"],
           "syslog": logs.LEVELS["quiet"]}
ENV_SOURCES = [s for s in flags.LEVEL_SOURCES if s.kind == "env"]
OCI_SOURCES = [s for s in flags.LEVEL_SOURCES if s.kind == "oci.conf"]



@pytest.fixture
def fresh_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


def sinks_for(levels: dict[str, int], log: Path | None = None, fmt: str = "json") -> logs.Sinks:
    return logs.Sinks(stderr_level=levels["stderr"], file_level=levels["file"],
                      syslog_level=levels["syslog"], log_path=log, log_format=fmt)


class TestLadder:
    def test_slurm_order(self) -> None:
        """The ladder is Slurm's 0-9 order, each level more verbose than the one before."""
        assert ["quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3",
                "debug4", "debug5"] == LADDER
        numbers = [lvl.number for lvl in flags.LEVELS]
        assert sorted(numbers, reverse=True) == numbers
        assert len(set(numbers)) == len(numbers)

    @pytest.mark.parametrize("index", range(10))
    def test_words_and_digits(self, index: int) -> None:
        """Each word in any case, and its digit, name the same level."""
        word = LADDER[index]
        assert [word] * 3 == [flags.level_word(word.upper()), flags.level_word(f" {word} "),
                              flags.level_word(str(index))]

    @pytest.mark.parametrize("value", ["loud", "10", "", "debug6", "warning", "²"])
    def test_unknown_word(self, value: str) -> None:
        """Anything else is a ValueError listing the valid words (crun's `warning` only
        where asked for)."""
        with pytest.raises(ValueError, match="use quiet, fatal, error, info, verbose"):
            flags.level_word(value)

    def test_one_home(self) -> None:
        """logs and oci.conf take their level words from flags.LEVELS."""
        assert {w: flags.level(w).number for w in LADDER} == logs.LEVELS
        for word in LADDER:
            assert word == parse_oci_conf(
                "RunTimeRun=r\nRunTimeKill=k\nRunTimeDelete=d\n"
                f"FileDebug={word.upper()}").file_debug


class TestSources:
    @pytest.mark.parametrize("source", ENV_SOURCES, ids=lambda s: s.name)
    @pytest.mark.parametrize("word", LADDER)
    def test_env(self, source: flags.LevelSource, word: str) -> None:
        """Each SCRUN_*DEBUG variable sets exactly its sinks, at every ladder level."""
        got = logs.env_levels({source.name: word}, debug=False, verbosity=0)
        assert {**DEFAULT, **dict.fromkeys(source.sinks, logs.LEVELS[word])} == got

    @pytest.mark.parametrize("source", OCI_SOURCES, ids=lambda s: s.name)
    @pytest.mark.parametrize("word", LADDER)
    def test_oci_conf(self, source: flags.LevelSource, word: str) -> None:
        """Each oci.conf *Debug key overrides its sink in the anchor, last of all."""
        sink = source.sinks[0]
        got = logs.env_levels({"SCRUN_DEBUG": "debug5"}, debug=True, verbosity=2,
                              overrides={sink: word})
        assert logs.LEVELS[word] == got[sink]

    @pytest.mark.parametrize("word", [*LADDER, "warning", "WARN"])
    def test_log_level(self, word: str) -> None:
        """--log-level (crun) sets stderr and the --log file; takes crun's `warning` too."""
        got = logs.env_levels({}, debug=False, verbosity=0, log_level=word)
        number = flags.level(flags.level_word(word, extra=flags.CRUN_LOG_LEVELS)).number
        assert {**DEFAULT, "stderr": number, "file": number} == got

    def test_debug(self) -> None:
        """--debug: stderr and the --log file at debug."""
        got = logs.env_levels({}, debug=True, verbosity=0)
        assert {**DEFAULT, "stderr": 10, "file": 10} == got

    @pytest.mark.parametrize(("count", "word"), [
        (1, "verbose"), (2, "debug"), (3, "debug2"), (4, "debug3"), (5, "debug4"),
        (6, "debug5"), (9, "debug5")])
    def test_verbosity(self, count: int, word: str) -> None:
        """-v steps stderr from info (Slurm's base), one level per -v, up to debug5."""
        got = logs.env_levels({}, debug=False, verbosity=count)
        assert {**DEFAULT, "stderr": logs.LEVELS[word]} == got

    def test_later_source_wins(self) -> None:
        """Order of LEVEL_SOURCES: SCRUN_DEBUG, then one sink's variable, then flags."""
        env = {"SCRUN_DEBUG": "debug3", "SCRUN_FILE_DEBUG": "error"}
        assert {"stderr": 8, "file": 40, "syslog": 8} == logs.env_levels(
            env, debug=False, verbosity=0)
        assert {"stderr": 10, "file": 10, "syslog": 8} == logs.env_levels(
            env, debug=True, verbosity=0)
        # -v counts from the level set so far when that is more verbose than info
        assert 7 == logs.env_levels(env, debug=False, verbosity=1)["stderr"]

    @pytest.mark.parametrize("var", [s.name for s in ENV_SOURCES])
    def test_unknown_word_names_its_source(self, var: str) -> None:
        """A bad word is a one-line ConfigError naming the variable."""
        with pytest.raises(ConfigError, match=f"^{var}: invalid debug level 'loud': use "):
            logs.env_levels({var: "loud"}, debug=False, verbosity=0)

    def test_unknown_oci_conf_override(self) -> None:
        """A bad oci.conf level (if one got past the parser) names the key."""
        with pytest.raises(ConfigError, match=r"^oci\.conf StdIODebug: invalid debug level"):
            logs.env_levels({}, debug=False, verbosity=0, overrides={"stderr": "loud"})


class TestSettingsThatOnceFailed:
    """The settings that made create fail with a KeyError traceback: the
    anchor's own logging setup, with a record at and below the level."""

    @pytest.mark.parametrize(("env", "debug", "verbosity", "overrides", "sink", "word"), [
        ({"SCRUN_DEBUG": "debug2"}, False, 0, {}, "stderr", "debug2"),
        ({"SCRUN_DEBUG": "verbose"}, False, 0, {}, "file", "verbose"),
        ({"SCRUN_DEBUG": "debug5"}, False, 0, {}, "stderr", "debug5"),
        ({"SCRUN_STDERR_DEBUG": "debug3"}, False, 0, {}, "stderr", "debug3"),
        ({}, False, 0, {"stderr": "debug2"}, "stderr", "debug2"),
        ({}, False, 1, {}, "stderr", "verbose"),
        ({}, False, 3, {}, "stderr", "debug2"),
        ({"SCRUN_SYSLOG_DEBUG": "debug4"}, False, 0, {}, "syslog", "debug4"),
    ])
    def test_anchor_setup_logs_at_level(
            self, env: dict[str, str], debug: bool, verbosity: int,
            overrides: dict[str, str], sink: str, word: str, tmp_path: Path,
            fresh_structlog: None, capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> None:
        sent: list[tuple[int, str]] = []
        monkeypatch.setattr("syslog.syslog", lambda prio, line: sent.append((prio, line)))
        monkeypatch.setattr("syslog.openlog", lambda *a: None)
        log = tmp_path / "log.json"
        levels = logs.env_levels(env, debug=debug, verbosity=verbosity, overrides=overrides)
        logs.configure_structlog(sinks_for(levels, log))
        log_obj = structlog.get_logger()
        logs.log_at(log_obj, word, "at level")
        below = LADDER[LADDER.index(word) + 1] if word != "debug5" else None
        if below:
            logs.log_at(log_obj, below, "below level")
        log_obj.debug("plain debug")
        if sink == "stderr":
            got = [ln for ln in capsys.readouterr().err.splitlines() if "level" in ln]
        elif sink == "file":
            got = log.read_text().splitlines()
        else:
            got = [line for _prio, line in sent]
        msgs = [m for m in ("at level", "below level") if any(f'"{m}"' in g for g in got)]
        assert ["at level"] == msgs
        assert any(f"level={word} " in g or f'"level":"{word}"' in g for g in got)

    @pytest.mark.parametrize("argv", [["-v"], ["-vvv"], ["-v", "-v", "-v", "-v", "-v", "-v"],
                                      ["--debug", "-vv"], ["--log-level", "debug3"]])
    def test_cli_flags_before_verb(self, argv: list[str], tmp_path: Path) -> None:
        """-v/-vvv/... before the verb are accepted and reach the verb's invocation."""
        from unittest import mock

        with mock.patch("scrun_py.commands.state.run") as verb:
            assert 0 == run([*argv, "--root", str(tmp_path), "state", "c1"])
        inv = verb.call_args.args[0]
        assert inv.levels[0] <= logs.LEVELS["verbose"]

    @pytest.mark.parametrize("var", [s.name for s in ENV_SOURCES])
    @pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "click"])
    def test_unknown_word_one_line(self, var: str, fast: bool, tmp_path: Path) -> None:
        """SCRUN_*DEBUG=loud: one line on stderr, one error record in --log, exit 1,
        on the engine's click-free path and through click alike."""
        log = tmp_path / "log.json"
        argv = ["--root", str(tmp_path), "--log", str(log), "--log-format", "json"]
        argv += ["state", "c1"] if fast else ["--systemd-cgroup", "-v", "state", "c1"]
        res = subprocess.run([sys.executable, "-m", "scrun_py", *argv], capture_output=True,
                             text=True, timeout=60, check=False, env={var: "loud"})
        assert 1 == res.returncode
        assert [f"scrun-py: {var}: invalid debug level 'loud': use quiet, fatal, error, info, "
                "verbose, debug, debug2, debug3, debug4, debug5 or a digit 0-9"] == \
            res.stderr.splitlines()
        record = json.loads(log.read_text())
        assert ("error", res.stderr.strip().removeprefix("scrun-py: ")) == (
            record["level"], record["msg"])

    def test_unknown_log_level_flag(self, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
        """--log-level loud fails on one line (crun's words are listed)."""
        assert 1 == run(["--log-level", "loud", "--root", str(tmp_path), "state", "c1"])
        err = capsys.readouterr().err
        assert 1 == len(err.splitlines())
        assert "--log-level: invalid debug level 'loud'" in err
        assert "warning" in err


class TestSinks:
    @pytest.mark.parametrize("lvl", [*flags.LEVELS[1:], flags.WARNING], ids=lambda x: x.word)
    def test_syslog_priority(self, lvl: flags.Level, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each record reaches syslog at its level's priority and says its level."""
        import syslog

        sent: list[tuple[int, str]] = []
        monkeypatch.setattr(syslog, "syslog", lambda prio, line: sent.append((prio, line)))
        monkeypatch.setattr(syslog, "openlog", lambda *a: None)
        sinks = sinks_for({"stderr": 100, "file": 100, "syslog": 6})
        sinks.emit(lvl.word, "m", {"k": 1})
        assert 1 == len(sent)
        prio, line = sent[0]
        assert getattr(syslog, lvl.syslog) == prio
        assert (lvl.word, "m", 1) == tuple(json.loads(line)[k] for k in ("level", "msg", "k"))

    def test_syslog_opened_once_with_one_facility(self,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """However many records, sinks and audit records, openlog runs once per process,
        with LOG_USER; the audit trail keeps its own priority (notice)."""
        import syslog

        from scrun_py.site import audit

        opened: list[tuple[Any, ...]] = []
        sent: list[int] = []
        monkeypatch.setattr(syslog, "syslog", lambda prio, _line: sent.append(prio))
        monkeypatch.setattr(syslog, "openlog", lambda *a: opened.append(a))
        logs._open_syslog.cache_clear()
        try:
            for _ in range(2):
                sinks = sinks_for({"stderr": 100, "file": 100, "syslog": 6})
                sinks.emit("error", "a")
                sinks.emit("debug5", "b")
                audit.record(audit.AuditSettings(syslog=True), "kill", container_id="c1")
            logs.syslog_line("info", "c")
        finally:
            logs._open_syslog.cache_clear()
        assert [("scrun-py", syslog.LOG_PID, syslog.LOG_USER)] == opened
        assert [syslog.LOG_ERR, syslog.LOG_DEBUG, syslog.LOG_NOTICE] * 2 + [
            syslog.LOG_INFO] == sent

    def test_structlog_configured_once(self, fresh_structlog: None, tmp_path: Path) -> None:
        """A second configure keeps structlog's setup and moves the new levels into the
        sinks already installed (the anchor sets levels again once oci.conf is read)."""
        first = logs.configure_structlog(sinks_for(DEFAULT))
        config = structlog.get_config()
        log = tmp_path / "log.json"
        second = logs.configure_structlog(sinks_for({**DEFAULT, "file": 9}, log))
        assert first is second
        assert config["processors"] == structlog.get_config()["processors"]
        logs.log_at(structlog.get_logger(), "debug2", "after")
        assert "debug2" == json.loads(log.read_text())["level"]

    def test_method_names(self, fresh_structlog: None, tmp_path: Path) -> None:
        """structlog's method names become record levels (critical is Slurm's fatal)."""
        log = tmp_path / "log.json"
        logs.configure_structlog(sinks_for({**DEFAULT, "file": 6}, log))
        log_obj = structlog.get_logger()
        log_obj.critical("c")
        log_obj.error("e")
        log_obj.warning("w")
        log_obj.info("i")
        log_obj.debug("d")
        assert ["fatal", "error", "warning", "info", "debug"] == [
            json.loads(line)["level"] for line in log.read_text().splitlines()]

    def test_note_without_structlog(self, tmp_path: Path) -> None:
        """Short-lived commands log through Invocation.note (no structlog import)."""
        from scrun_py.base.invocation import Invocation

        log = tmp_path / "log.json"
        inv = Invocation.resolve(root=tmp_path, log_path=log, log_format="json",
                                 environ={"SCRUN_FILE_DEBUG": "debug2"})
        inv.note("debug2", "kept")
        inv.note("debug3", "dropped")
        assert ["kept"] == [json.loads(line)["msg"] for line in log.read_text().splitlines()]


class TestAnchorLevels:
    def test_log_level_reaches_anchor(self, tmp_path: Path) -> None:
        """--log-level rides in the anchor's spec; its logger applies it, and its records
        carry the anchor's fields first."""
        from scrun_py.anchor.__main__ import _logger
        from scrun_py.anchor.handoff import AnchorSpec

        spec = AnchorSpec(container_id="c1", root=str(tmp_path), orig_bundle="", pid_file="",
                          console_socket="", log_path=str(tmp_path / "log.json"),
                          log_format="json", debug=False, verbosity=0, slurm_conf="",
                          ready_fd=-1, created="", log_level="debug3")
        spec = AnchorSpec.from_json(spec.to_json())
        log = _logger(spec, {})
        sinks = log.sinks
        assert (8, 8, 100) == (sinks.stderr_level, sinks.file_level, sinks.syslog_level)
        sinks.stderr_level = 100
        log.info("hello", n=1)
        logs.log_at(log, "debug4", "too deep")  # below debug3: not written
        lines = (tmp_path / "log.json").read_text().splitlines()
        assert 1 == len(lines)
        record = json.loads(lines[0])
        assert (["level", "msg", "time", "component", "container_id", "n"],
                ("info", "hello", "anchor", "c1", 1)) == (
            list(record), (record["level"], record["msg"], record["component"],
                           record["container_id"], record["n"]))


class TestTimestamp:
    def test_rfc3339_utc_to_the_microsecond(self) -> None:
        import datetime
        import re

        before = datetime.datetime.now(datetime.UTC)
        stamp = logs.rfc3339_now()
        after = datetime.datetime.now(datetime.UTC)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp)
        parsed = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.UTC)
        assert before <= parsed <= after


class TestLogger:
    """The anchor's logger writes what structlog wrote, without structlog."""

    def test_levels_exception_and_binding(self, tmp_path: Path) -> None:
        path = tmp_path / "log.json"
        log = logs.Logger(sinks_for({**DEFAULT, "file": logs.LEVELS["debug"]}, path),
                          {"component": "anchor"}).bind(container_id="c1")
        log.debug("d")
        log.warning("w")
        logs.log_at(log, "debug2", "below debug")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
        log.error("given", exc_info=RuntimeError("later"))
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert [("debug", "d"), ("warning", "w"), ("error", "failed"), ("error", "given")] == [
            (r["level"], r["msg"]) for r in records]
        assert all(("anchor", "c1") == (r["component"], r["container_id"]) for r in records)
        assert records[2]["exception"].endswith("ValueError: boom")
        assert records[3]["exception"].endswith("RuntimeError: later")
