"""Log records stay one line whatever an image or a caller puts in them: base/logs.py
`one_line`, the --log records (json and text), the fatal record (stderr and --log), the
sinks, the audit trail and the Lua hooks' user messages."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from scrun_py.base import logs
from scrun_py.hooks.lua import LuaHooks
from scrun_py.site import audit

#: a value that would end a line, forge the next record and drive the terminal
HOSTILE = 'x\n{"level":"error","msg":"forged"}\r\t\x1b[2J\x00\x7f\x85\u2028\udc80 end'
#: what one_line makes of it
ESCAPED = ('x\\n{"level":"error","msg":"forged"}\\r\\t\\x1b[2J\\x00\\x7f\\x85\\u2028'
           '\\udc80 end')


def _is_one_line(text: str) -> bool:
    """One line of printable characters: no line break of any kind, no control."""
    return len(text.splitlines()) <= 1 and text.isprintable()


def _json_line(line: str) -> dict[str, object]:
    assert _is_one_line(line), line
    record = json.loads(line)
    assert isinstance(record, dict)
    return record


class TestOneLine:
    def test_escapes(self) -> None:
        assert ESCAPED == logs.one_line(HOSTILE)

    @pytest.mark.parametrize("text", ["", "plain /path", "tab\\t and \\n as typed", "é ü ∂"])
    def test_printable_text_unchanged(self, text: str) -> None:
        assert text == logs.one_line(text)

    @pytest.mark.parametrize("code", [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029,
                                      0xD800, 0xDCFF, 0xDFFF])
    def test_every_control_and_surrogate(self, code: int) -> None:
        escaped = logs.one_line(f"a{chr(code)}b")
        assert _is_one_line(escaped) and escaped.isascii(), escaped
        assert escaped.startswith("a\\") and escaped.endswith("b")


class TestRecords:
    @pytest.mark.parametrize("fmt", ["json", "text"])
    def test_msg_and_fields(self, fmt: str) -> None:
        line = logs.format_record("info", HOSTILE, fmt, {"path": HOSTILE, HOSTILE: 1,
                                                         "obj": Path(HOSTILE)})
        assert _is_one_line(line), line
        if fmt == "json":
            record = _json_line(line)
            assert (HOSTILE, HOSTILE, 1, HOSTILE) == (
                record["msg"], record["path"], record[HOSTILE], record["obj"])
        else:
            assert f" {ESCAPED}=1 " in line
            assert f"msg={json.dumps(HOSTILE)} " in line

    @pytest.mark.parametrize("fmt", ["json", "text"])
    def test_what_json_refuses_is_its_text(self, fmt: str) -> None:
        """NaN, a key that is no string, a cycle: still one valid record."""
        cycle: list[object] = []
        cycle.append(cycle)
        line = logs.format_record("info", "m", fmt, {"nan": float("nan"), "cycle": cycle,
                                                     "keys": {(1, 2): "v"}})
        assert _is_one_line(line), line
        if fmt == "json":
            record = _json_line(line)
            assert ("nan", "[[...]]", "{(1, 2): 'v'}") == (
                record["nan"], record["cycle"], record["keys"])

    @pytest.mark.parametrize("fmt", ["json", "text"])
    def test_fatal_record(self, fmt: str, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
        """One line on stderr (line breaks made spaces, the rest escaped), one record."""
        log = tmp_path / "log"
        logs.fatal_record(f"bundle {HOSTILE}: refused", log, fmt)
        err = capsys.readouterr().err
        shown = ('bundle x {"level":"error","msg":"forged"} \\x1b[2J\\x00\\x7f '
                 '\\udc80 end: refused')
        assert f"scrun-py: {shown}\n" == err
        lines = log.read_text().splitlines()
        assert 1 == len(lines) and _is_one_line(lines[0])
        if fmt == "json":
            assert shown == _json_line(lines[0])["msg"]

    @pytest.mark.parametrize("fmt", ["json", "text"])
    def test_sinks(self, fmt: str, tmp_path: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
        """A record with a traceback and a hostile field: one line on stderr and in the
        file, from the anchor's Logger as from `emit`."""
        log = tmp_path / "log"
        sinks = logs.Sinks(stderr_level=logs.LEVELS["info"], file_level=logs.LEVELS["info"],
                           syslog_level=logs.LEVELS["quiet"], log_path=log, log_format=fmt)
        sinks.emit("warning", HOSTILE, {"variable": HOSTILE})
        try:
            raise ValueError(HOSTILE)
        except ValueError:
            logs.Logger(sinks, {"container_id": "c1"}).exception("crashed", name=HOSTILE)
        for text in (capsys.readouterr().err, log.read_text()):
            lines = text.splitlines()
            assert 2 == len(lines) and all(_is_one_line(line) for line in lines), text
        if fmt == "json":
            record = _json_line(log.read_text().splitlines()[1])
            assert HOSTILE == record["name"]
            assert str(record["exception"]).endswith(f"ValueError: {HOSTILE}")


class TestAudit:
    def test_record_is_one_line_of_json(self, tmp_path: Path) -> None:
        """json.dumps's ASCII escapes: each record one line, the values as they were."""
        settings = audit.AuditSettings(file=str(tmp_path / "{user}.jsonl"))
        audit.record(settings, "create-failed", container_id="c1", bundle=HOSTILE,
                     error=f"bundle {HOSTILE}: refused", path=Path(HOSTILE))
        audit.record(settings, "create", container_id="c1", bundle="/b")
        (file,) = tmp_path.glob("*.jsonl")
        lines = file.read_text().splitlines()
        assert 2 == len(lines)
        first = _json_line(lines[0])
        assert (HOSTILE, f"bundle {HOSTILE}: refused", HOSTILE) == (
            first["bundle"], first["error"], first["path"])
        assert "create" == _json_line(lines[1])["event"]


class TestLuaUserMessage:
    def test_log_user_is_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        """slurm.log_user's message (which a script may build from config.json) is one
        line on the caller's terminal."""
        quiet = logs.Logger(logs.Sinks(stderr_level=logs.LEVELS["quiet"],
                                       file_level=logs.LEVELS["quiet"],
                                       syslog_level=logs.LEVELS["quiet"], log_path=None,
                                       log_format="json"))
        hooks = SimpleNamespace(_logger=lambda: quiet, script="scrun.lua")
        LuaHooks._log_user(hooks, HOSTILE)  # type: ignore[arg-type]
        assert f"{ESCAPED}\n" == capsys.readouterr().err
