"""Control-socket messages between CLI commands and the anchor, and their framing.

One newline-terminated JSON object per direction per connection, with `"v": 1`
and a `"type"` (requests) or `"ok"` (replies).  Pure: no sockets here.
"""

from __future__ import annotations

import json
from typing import Any

from scrun_py.errors import ProtocolError, ScrunError, error_kind

VERSION = 1
MAX_MESSAGE = 64 * 1024
REQUEST_TYPES = frozenset({"state", "start", "kill", "delete"})


def encode_request(kind: str, **fields: Any) -> bytes:
    if kind not in REQUEST_TYPES:
        raise ProtocolError(f"unknown request type {kind!r}")
    return _encode({"v": VERSION, "type": kind, **fields})


def encode_ok(**fields: Any) -> bytes:
    return _encode({"v": VERSION, "ok": True, **fields})


def encode_error(err: BaseException) -> bytes:
    return _encode({"v": VERSION, "ok": False, "kind": error_kind(err), "message": str(err)})


def _encode(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_MESSAGE:
        raise ProtocolError("message too large")
    return data


def decode(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_MESSAGE:
        raise ProtocolError("message too large")
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[…" nested too deep
        raise ProtocolError("malformed control message") from exc
    # type() check: JSON `true` and `1.0` compare equal to 1 but are not version 1.
    if not isinstance(obj, dict) or type(obj.get("v")) is not int or obj["v"] != VERSION:
        raise ProtocolError("unsupported control message version")
    return obj


def decode_request(line: bytes) -> dict[str, Any]:
    obj = decode(line)
    # isinstance first: a list or object `type` is unhashable and would raise TypeError.
    if not isinstance(obj.get("type"), str) or obj["type"] not in REQUEST_TYPES:
        raise ProtocolError(f"unknown request type {obj.get('type')!r}")
    return obj


def reply_or_raise(obj: dict[str, Any]) -> dict[str, Any]:
    """Return a successful reply, or raise the error class the anchor raised."""
    if obj.get("ok") is True:
        return obj
    from scrun_py.errors import rebuild

    kind = str(obj.get("kind", "ScrunError"))
    err: ScrunError = rebuild(kind, str(obj.get("message", "anchor reported an error")))
    raise err
