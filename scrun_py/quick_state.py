"""`state` in the argv shape engines and tools send, with nothing but os and json.

`state` is polled; the interpreter's start is most of its cost, and the modules the
full path imports (settings, logs, store, dataclasses, pathlib) would double it.  This
answers only the plain case: `--root` given, an id of the usual characters, a readable
well-formed record, no diagnostics settings.  Anything else returns None and goes the
full way (entry.py, commands/state.py), which owns every error and its wording; the
unit tests check that both print the same document.
"""

from __future__ import annotations

import json
import os

from scrun_py.procs import process_start_time

_GLOBALS = ("--root", "--log", "--log-format", "-f", "--slurm-conf")
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")
_STATUSES = ("creating", "created", "running", "stopped")
_TYPES = (("id", str), ("bundle", str), ("rootfs", str), ("oci_version", str),
          ("annotations", dict), ("status", str), ("anchor_pid", int), ("anchor_start", str),
          ("created", str), ("owner", str))


def _parse(argv: list[str]) -> tuple[str, str] | None:
    """(root, id) of `[--root R] [--log L] [--log-format F] [-f C] state ID`."""
    if len(argv) < 2 or argv[-2] != "state":
        return None
    opts: dict[str, str] = {}
    words = argv[:-2]
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
    cid = argv[-1]
    if (not cid or len(cid) > 255 or cid in (".", "..")
            or not set(cid) <= _ID_CHARS or "--root" not in opts):
        return None
    return opts["--root"], cid


def answer(argv: list[str], environ: dict[str, str] | os._Environ[str]) -> str | None:
    """The line `state` prints, or None when the full path must answer."""
    if any(k.startswith("SCRUN_") and k.endswith("DEBUG") for k in environ):
        return None  # diagnostics levels: validated (and maybe logged) by the full path
    parsed = _parse(argv)
    if parsed is None:
        return None
    root, cid = parsed
    try:
        with open(os.path.join(os.path.abspath(root), cid, "state.json"), "rb") as fh:
            rec = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("status") not in _STATUSES:
        return None
    rec = {"oci_version": "1.0.2", "annotations": {}, "anchor_pid": 0, "anchor_start": "",
           "created": "", "owner": "", **rec}
    if not all(type(rec.get(key)) is kind for key, kind in _TYPES):
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
    return json.dumps(doc, separators=(",", ":"))
