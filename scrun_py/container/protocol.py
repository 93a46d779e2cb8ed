"""Control-socket messages between CLI commands and the anchor, and their framing.

One newline-terminated JSON object per direction per connection, with `"v": 1`
and a `"type"` (requests) or `"ok"` (replies).  Pure: no sockets here.  Imported by
`start`, `kill` and `delete` on their way to the anchor: nothing here imports json or
typing.
"""

from __future__ import annotations

from scrun_py.base.errors import ProtocolError, ScrunError, error_kind
from scrun_py.container import fastjson

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    Protocol = object

VERSION = 1
MAX_MESSAGE = 64 * 1024
TOO_LARGE = "message too large"
REQUEST_TYPES = frozenset({"start", "kill", "delete"})


def encode_request(kind: str, **fields: Any) -> bytes:
    if kind not in REQUEST_TYPES:
        raise ProtocolError(f"unknown request type {kind!r}")
    return _encode({"v": VERSION, "type": kind, **fields})


def encode_ok(**fields: Any) -> bytes:
    return _encode({"v": VERSION, "ok": True, **fields})


def encode_error(err: BaseException) -> bytes:
    return _encode({"v": VERSION, "ok": False, "kind": error_kind(err), "message": str(err)})


def _encode(obj: dict[str, Any]) -> bytes:
    data = fastjson.dumps(obj).encode() + b"\n"
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(TOO_LARGE)
    return data


def decode(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_MESSAGE:
        raise ProtocolError(TOO_LARGE)
    try:
        obj = fastjson.loads(line)
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


class _Readable(Protocol):
    def recv(self, bufsize: int, /) -> bytes: ...


def read_line(conn: _Readable, limit: int = MAX_MESSAGE) -> bytes:
    """One message line from a connected socket (what arrived before EOF if it has no
    newline); ProtocolError past `limit` bytes."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(limit + 1 - len(buf))
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ProtocolError(TOO_LARGE)
    return buf


def reply_or_raise(obj: dict[str, Any]) -> dict[str, Any]:
    """Return a successful reply, or raise the error class the anchor raised."""
    if obj.get("ok") is True:
        return obj
    from scrun_py.base.errors import rebuild

    kind = str(obj.get("kind", "ScrunError"))
    err: ScrunError = rebuild(kind, str(obj.get("message", "anchor reported an error")))
    raise err
