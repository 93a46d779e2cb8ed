"""Unit tests for scrun_py.container.protocol: control-socket messages and their framing."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from scrun_py.base import errors
from scrun_py.base.errors import ContainerNotRunning, ProtocolError, ScrunError
from scrun_py.container import protocol


class TestRequests:
    @pytest.mark.parametrize(("kind", "fields"), [
        ("start", {}), ("kill", {"signal": 15}), ("delete", {"force": True}),
    ])
    def test_round_trip(self, kind: str, fields: dict[str, object]) -> None:
        """Every request type decodes back to its type, version and fields."""
        decoded = protocol.decode_request(protocol.encode_request(kind, **fields))
        assert {"v": 1, "type": kind, **fields} == decoded

    def test_framing(self) -> None:
        """A message is one line of compact JSON ending in exactly one newline."""
        data = protocol.encode_request("kill", signal=9)
        assert b'{"v":1,"type":"kill","signal":9}\n' == data

    def test_encode_unknown_type(self) -> None:
        """Encoding a request type the anchor does not know is refused."""
        with pytest.raises(ProtocolError, match="unknown request type 'exec'"):
            protocol.encode_request("exec")

    @pytest.mark.parametrize("line", [
        b'{"v":1,"type":"exec"}\n', b'{"v":1}\n', b'{"v":1,"type":null}\n',
        b'{"v":1,"type":"state"}\n',
        b'{"v":1,"type":["kill"]}\n', b'{"v":1,"type":{"a":1}}\n', b'{"v":1,"type":1}\n',
    ])
    def test_decode_unknown_type(self, line: bytes) -> None:
        """A missing, unknown or non-string request type is a ProtocolError (never TypeError)."""
        with pytest.raises(ProtocolError, match="unknown request type"):
            protocol.decode_request(line)

    def test_unicode_survives(self) -> None:
        """Non-ASCII field values round-trip."""
        decoded = protocol.decode_request(protocol.encode_request("kill", note="café ☃"))
        assert "café ☃" == decoded["note"]


class TestVersion:
    @pytest.mark.parametrize("line", [
        b'{"v":2,"type":"start"}\n', b'{"type":"start"}\n', b'{"v":"1","type":"start"}\n',
        b'{"v":true,"type":"start"}\n', b'{"v":1.0,"type":"start"}\n', b'{"v":0,"ok":true}\n',
    ])
    def test_wrong_version(self, line: bytes) -> None:
        """Anything but the integer version 1 is rejected, including true and 1.0."""
        with pytest.raises(ProtocolError, match="unsupported control message version"):
            protocol.decode(line)

    @pytest.mark.parametrize("line", [b"[]\n", b'"v"\n', b"1\n", b"null\n"])
    def test_not_an_object(self, line: bytes) -> None:
        """Valid JSON that is not an object is rejected."""
        with pytest.raises(ProtocolError):
            protocol.decode(line)


class TestMalformed:
    @pytest.mark.parametrize("line", [
        b"", b"\n", b"{", b"{'v': 1}\n", b'{"v":1,}\n', b"\xff\xfe\x00garbage\n",
        b'{"v":1}{"v":1}\n',
    ])
    def test_malformed_json(self, line: bytes) -> None:
        """Bytes that are not one JSON document are a ProtocolError."""
        with pytest.raises(ProtocolError, match="malformed control message"):
            protocol.decode(line)

    def test_deeply_nested(self) -> None:
        """A small but deeply nested message is a ProtocolError, not a RecursionError."""
        with pytest.raises(ProtocolError, match="malformed control message"):
            protocol.decode(b"[" * 50_000)


class TestSizeLimit:
    def test_oversize_decode(self) -> None:
        """A line longer than MAX_MESSAGE is refused before parsing."""
        line = json.dumps({"v": 1, "pad": "x" * protocol.MAX_MESSAGE}).encode()
        with pytest.raises(ProtocolError, match="message too large"):
            protocol.decode(line)

    def test_oversize_encode(self) -> None:
        """A message that would not fit is refused when encoding."""
        with pytest.raises(ProtocolError, match="message too large"):
            protocol.encode_ok(pad="x" * protocol.MAX_MESSAGE)

    def test_largest_message_fits(self) -> None:
        """A message of exactly MAX_MESSAGE bytes, newline included, is accepted both ways."""
        overhead = len(protocol.encode_ok(pad=""))
        data = protocol.encode_ok(pad="x" * (protocol.MAX_MESSAGE - overhead))
        assert protocol.MAX_MESSAGE == len(data)
        assert "x" * (protocol.MAX_MESSAGE - overhead) == protocol.decode(data)["pad"]


class TestReplies:
    def test_ok_round_trip(self) -> None:
        """A successful reply is returned with its fields."""
        obj = protocol.decode(protocol.encode_ok(job_id=42, status="running"))
        assert {"v": 1, "ok": True, "job_id": 42, "status": "running"} == (
            protocol.reply_or_raise(obj))

    def test_error_reraises_same_class(self) -> None:
        """ContainerNotRunning crosses the socket as the same class with runc's exact message."""
        obj = protocol.decode(protocol.encode_error(ContainerNotRunning()))
        with pytest.raises(ContainerNotRunning) as info:
            protocol.reply_or_raise(obj)
        assert "container not running" == str(info.value)

    @pytest.mark.parametrize("err", [
        errors.ContainerExists(), errors.ContainerNotFound(), errors.ContainerStillRunning(),
        errors.ContainerStillRunning("c1"),
        errors.InvalidContainerId("empty"), errors.NotSupported("exec"),
        errors.BundleError("bundle /b: config.json not found"), errors.HookError("boom"),
        errors.AllocationFailed("salloc failed"), errors.PermissionDenied("permission denied"),
        ScrunError("plain"),
    ])
    def test_every_error_class_round_trips(self, err: ScrunError) -> None:
        """Each registered error class is rebuilt as the same class with the same message."""
        obj = protocol.decode(protocol.encode_error(err))
        with pytest.raises(ScrunError) as info:
            protocol.reply_or_raise(obj)
        assert (type(err), str(err)) == (type(info.value), str(info.value))
        assert err.exit_code == info.value.exit_code

    def test_error_wire_format(self) -> None:
        """An error reply carries ok=false, the class name as kind, and the message."""
        data = protocol.encode_error(ContainerNotRunning())
        assert {"v": 1, "ok": False, "kind": "ContainerNotRunning",
                "message": "container not running"} == json.loads(data)

    def test_foreign_exception_is_generic(self) -> None:
        """A non-ScrunError is sent as a plain ScrunError with its message."""
        obj = protocol.decode(protocol.encode_error(RuntimeError("oops")))
        with pytest.raises(ScrunError) as info:
            protocol.reply_or_raise(obj)
        assert (ScrunError, "oops") == (type(info.value), str(info.value))

    def test_unknown_kind(self) -> None:
        """An error kind this side does not know becomes a plain ScrunError."""
        with pytest.raises(ScrunError) as info:
            protocol.reply_or_raise({"v": 1, "ok": False, "kind": "Frobnicated",
                                     "message": "frob"})
        assert (ScrunError, "frob") == (type(info.value), str(info.value))

    def test_missing_fields(self) -> None:
        """An error reply without kind or message still raises a ScrunError with a message."""
        with pytest.raises(ScrunError) as info:
            protocol.reply_or_raise({"v": 1, "ok": False})
        assert (ScrunError, "anchor reported an error") == (type(info.value), str(info.value))

    @pytest.mark.parametrize("ok", [1, "true", None])
    def test_only_literal_true_is_success(self, ok: object) -> None:
        """`ok` must be the JSON literal true; anything else is treated as an error."""
        with pytest.raises(ScrunError):
            protocol.reply_or_raise({"v": 1, "ok": ok})


class _Recorder:
    """Stands in for the anchor's Lifecycle: records what the server asks of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def start(self) -> int:
        self.calls.append(("start", None))
        return 7

    def kill(self, sig: int) -> None:
        self.calls.append(("kill", sig))

    def delete(self, force: bool) -> None:
        self.calls.append(("delete", force))


class TestServerDispatch:
    """anchor/server.py: a request's fields must have exactly their JSON type."""

    @pytest.fixture
    def server(self) -> Any:
        from scrun_py.anchor.server import ControlServer
        from tests.unit.anchor_harness import quiet_logger

        return ControlServer(cast(Any, _Recorder()), cast(Any, None), quiet_logger())

    @pytest.mark.parametrize("sig", [0, 1, 9, 15, 64])
    def test_kill_with_a_signal_number(self, server: Any, sig: int) -> None:
        """An integer signal from 0 to SIGRTMAX (64) reaches the lifecycle as it is."""
        assert {} == server._dispatch({"v": 1, "type": "kill", "signal": sig})
        assert [("kill", sig)] == server.lc.calls

    @pytest.mark.parametrize("sig", [True, False, 1.0, 15.0, "15", "TERM", None, [15], {"n": 15},
                                     -1, 65, 2**64])
    def test_kill_refuses_anything_else(self, server: Any, sig: object) -> None:
        """true is not SIGHUP, 15.0 is not SIGTERM: a ProtocolError, and nothing is killed."""
        with pytest.raises(ProtocolError, match="invalid signal"):
            server._dispatch({"v": 1, "type": "kill", "signal": sig})
        assert [] == server.lc.calls

    def test_kill_without_a_signal(self, server: Any) -> None:
        with pytest.raises(ProtocolError, match="invalid signal"):
            server._dispatch({"v": 1, "type": "kill"})
        assert [] == server.lc.calls

    @pytest.mark.parametrize(("fields", "force"), [
        ({"force": True}, True), ({"force": False}, False), ({}, False)])
    def test_delete_force_is_a_bool(self, server: Any, fields: dict[str, object],
                                    force: bool) -> None:
        """force true or false, or absent (false), reaches the lifecycle as a bool."""
        assert {} == server._dispatch({"v": 1, "type": "delete", **fields})
        assert [("delete", force)] == server.lc.calls
        assert type(server.lc.calls[0][1]) is bool

    @pytest.mark.parametrize("force", [1, 0, "true", "", None, [], {}, 1.0])
    def test_delete_refuses_anything_else(self, server: Any, force: object) -> None:
        """A `force` that is not a JSON bool is a ProtocolError, not truthiness."""
        with pytest.raises(ProtocolError, match="invalid force"):
            server._dispatch({"v": 1, "type": "delete", "force": force})
        assert [] == server.lc.calls

    def test_refusal_is_an_error_reply(self, server: Any) -> None:
        """Over a real connection, `signal: true` is answered ok=false with ProtocolError."""
        import socket

        left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with left, right:
            left.sendall(b'{"v":1,"type":"kill","signal":true}\n')
            server._handle_one(right)
            right.close()
            reply = protocol.read_line(left)
        assert {"v": 1, "ok": False, "kind": "ProtocolError",
                "message": "invalid signal"} == json.loads(reply)
        assert [] == server.lc.calls
