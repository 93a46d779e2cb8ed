"""`state`, `start` of a created container and `delete` of a stopped one, in the argv
shapes engines and tools send, with nothing but os, socket and CPython's JSON scanner.

`state` is polled and the engines call `start` once and `delete` once or twice per
container; the
interpreter's start is most of their cost, and the modules the full path imports
(settings, logs, store, pathlib) would double it.  Even `import json` (which imports re and
enum) is a third of a quick `state`: JSON is read and written here through `_json`, the
C scanner and string encoder json itself uses, and anything it cannot read goes the
full way.  This answers only the
plain case: `--root` given, an id of the usual characters, a readable well-formed record,
no diagnostics settings, no site file (its audit trail is the full path's).  Anything
else returns None before doing anything and goes the full way (entry.py, commands/),
which owns every error and its wording; the unit tests check that both give the same
result.
"""

from __future__ import annotations

import os

from scrun_py.procs import process_start_time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# spool.STATE_FILE and slurm.argv.ABANDON_FILE (the unit tests check): what a stopped
# anchor leaves in its directory
STATE_FILE, ABANDON_FILE = "state.json", "on-abandon.sh"
SOCKET_NAME = "anchor.sock"  # spool.SOCKET_NAME
SYSTEM_SITE_FILE = "/etc/slurm/scrun-py.toml"  # site_conf.system_file()
_GLOBALS = ("--root", "--log", "--log-format", "-f", "--slurm-conf")
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")
_STATUSES = ("creating", "created", "running", "stopped")
_TYPES = (("id", str), ("bundle", str), ("rootfs", str), ("oci_version", str),
          ("annotations", dict), ("status", str), ("anchor_pid", int), ("anchor_start", str),
          ("created", str), ("owner", str))


def _parse(argv: list[str], verb: str) -> tuple[dict[str, str], str, bool] | None:
    """(globals, id, --force) of `[--root R] [--log L] [--log-format F] [-f C] VERB
    [--force|-f] ID` (--force for delete only), or None."""
    try:
        at = argv.index(verb)
    except ValueError:
        return None
    rest = argv[at + 1:]
    force = verb == "delete" and len(rest) == 2 and rest[0] in ("--force", "-f")
    if len(rest) != (2 if force else 1):
        return None
    opts: dict[str, str] = {}
    words = argv[:at]
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        key = "-f" if name == "--slurm-conf" else name
        if name not in _GLOBALS or key in opts or (name == "-f" and eq):
            return None
        if not eq:
            if i + 1 >= len(words):
                return None
            value = words[i + 1]
            i += 1
        opts[key] = value
        i += 1
    if opts.get("--log-format", "text") not in ("text", "json"):
        return None
    if opts.get("--log", "").startswith(("syslog:", "journald:")):
        return None
    cid = rest[-1]
    if (not cid or len(cid) > 255 or cid in (".", "..")
            or not set(cid) <= _ID_CHARS or "--root" not in opts):
        return None
    return opts, cid, force


class _ScanContext:
    """What json's decoder offers its C scanner: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not read here")


def _loads(data: bytes) -> Any:
    """json.loads of one JSON document; ValueError for anything else (also where the C
    scanner is missing: the caller then goes the full way)."""
    try:
        import _json
    except ImportError:
        raise ValueError("no C JSON scanner") from None
    text = data.decode()
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        # typeshed types the context as a scanner: the C code reads only its attributes
        obj, end = _json.make_scanner(_ScanContext())(text, start)  # type: ignore[arg-type]
    except StopIteration:
        raise ValueError("not JSON") from None
    if text[end:].strip(" \t\n\r"):
        raise ValueError("extra data")
    return obj


def _dumps(obj: Any) -> str:
    """json.dumps(obj, separators=(",", ":")) for str, int, None and dicts of them."""
    import _json

    if isinstance(obj, str):
        return str(_json.encode_basestring_ascii(obj))
    if obj is None or isinstance(obj, bool):
        return {None: "null", True: "true", False: "false"}[obj]
    if isinstance(obj, int):
        return int.__repr__(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_dumps(str(k))}:{_dumps(v)}" for k, v in obj.items()) + "}"
    raise TypeError(f"{type(obj).__name__} is not written here")


def _record(path: str) -> dict[str, Any] | None:
    """The record in state.json with every field we read of its type, or None."""
    try:
        with open(path, "rb") as fh:
            rec = _loads(fh.read())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or rec.get("status") not in _STATUSES:
        return None
    rec = {"oci_version": "1.0.2", "annotations": {}, "anchor_pid": 0, "anchor_start": "",
           "created": "", "owner": "", **rec}
    if not all(type(rec.get(key)) is kind for key, kind in _TYPES):
        return None
    return rec


def _plain_env(environ: Mapping[str, str]) -> bool:
    # diagnostics levels: validated (and maybe logged) by the full path
    return not any(k.startswith("SCRUN_") and k.endswith("DEBUG") for k in environ)


def answer(argv: list[str], environ: Mapping[str, str]) -> str | None:
    """The line `state` prints, or None when the full path must answer."""
    parsed = _parse(argv, "state") if _plain_env(environ) else None
    if parsed is None:
        return None
    opts, cid, _ = parsed
    rec = _record(os.path.join(os.path.abspath(opts["--root"]), cid, "state.json"))
    if rec is None:
        return None
    status, pid = rec["status"], rec["anchor_pid"]
    if status != "stopped":
        started = process_start_time(pid) if pid > 0 else ""
        if not started or (rec["anchor_start"] and started != rec["anchor_start"]):
            status = "stopped"
    doc = {"ociVersion": rec["oci_version"], "id": rec["id"], "status": status,
           "pid": 0 if status == "stopped" else pid, "bundle": rec["bundle"],
           "annotations": rec["annotations"], "rootfs": rec["rootfs"],
           "created": rec["created"], "owner": rec["owner"]}
    try:
        return _dumps(doc)
    except TypeError:  # an annotation that is not a string: json writes it
        return None


def _unaudited(argv: list[str], environ: Mapping[str, str],
               verb: str) -> tuple[dict[str, str], str, bool] | None:
    """`_parse` of a plain call of `verb`, or None, also where a site file sits next to
    slurm.conf or the system's slurm.conf: the site may keep an audit trail of starts
    and deletes (the system's file may make itself the one in use)."""
    parsed = _parse(argv, verb) if _plain_env(environ) else None
    if parsed is None:
        return None
    opts = parsed[0]
    conf = (os.path.abspath(opts["-f"]) if "-f" in opts
            else environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    if os.path.lexists(os.path.join(os.path.dirname(conf), "scrun-py.toml")) \
            or os.path.lexists(SYSTEM_SITE_FILE):
        return None
    return parsed


def delete(argv: list[str], environ: Mapping[str, str]) -> bool:
    """`delete` of a container whose anchor has stopped and left only its record (what
    the engines delete), or `delete --force` of one that is gone: done, True.  False
    when the full path must do it (nothing was touched then)."""
    parsed = _unaudited(argv, environ, "delete")
    if parsed is None:
        return False
    opts, cid, force = parsed
    cdir = os.path.join(os.path.abspath(opts["--root"]), cid)
    try:
        names = os.listdir(cdir)
        st = os.stat(cdir)
    except FileNotFoundError:
        return force and not os.path.lexists(cdir)  # gone: --force succeeds quietly
    except OSError:
        return False
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return False  # not the caller's own: the full path refuses it (commands/delete)
    rec = (_record(os.path.join(cdir, STATE_FILE))
           if STATE_FILE in names and set(names) <= {STATE_FILE, ABANDON_FILE} else None)
    if rec is None or rec["status"] != "stopped" or rec["anchor_pid"] != 0:
        return False
    for remove, path in [*((os.unlink, os.path.join(cdir, n)) for n in names),
                         (os.rmdir, cdir)]:
        try:
            remove(path)
        except OSError:
            pass  # as the full path's rmtree(ignore_errors=True)
    return True


def start(argv: list[str], environ: Mapping[str, str]) -> bool:
    """`start` of a created container whose anchor runs: True once the anchor launched
    the step.  False when the full path must do it (nothing was sent then).  After the
    request went out, a failure raises the error the full path raises (commands/start)."""
    parsed = _unaudited(argv, environ, "start")
    if parsed is None:
        return False
    opts, cid, _ = parsed
    cdir = os.path.join(os.path.abspath(opts["--root"]), cid)
    rec = _record(os.path.join(cdir, STATE_FILE))
    if rec is None or rec["status"] != "created" or rec["anchor_pid"] <= 0:
        return False
    started = process_start_time(rec["anchor_pid"])
    if not started or (rec["anchor_start"] and started != rec["anchor_start"]):
        return False
    import socket

    try:
        fd = os.open(cdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(5.0)
        try:  # the address of spool.connect: any --root length
            sock.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
        except OSError:
            sock.close()
            return False
    finally:
        os.close(fd)
    with sock:
        data = b""
        try:
            sock.settimeout(600)
            sock.sendall(b'{"v":1,"type":"start"}\n')
            while not data.endswith(b"\n") and len(data) <= 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            data = b""
    try:
        reply = _loads(data) if data else None
    except (ValueError, RecursionError):
        reply = None
    if isinstance(reply, dict) and type(reply.get("v")) is int and reply["v"] == 1 \
            and reply.get("ok") is True:
        return True
    from scrun_py import protocol
    from scrun_py.errors import ScrunError

    if not data:  # the anchor went away: what commands/start says then
        raise ScrunError("cannot start a container that has stopped")
    protocol.reply_or_raise(protocol.decode(data))
    raise ScrunError("cannot start a container that has stopped")  # not reached
