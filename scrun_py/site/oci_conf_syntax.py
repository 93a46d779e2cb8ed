"""oci.conf's ``Key=Value`` syntax, and the settings `create` hands to the anchor read
without pydantic.

`site/oci_conf.py` validates the whole file through its pydantic model (every key, its
error wording).  `create` needs only a few settings; `plain_settings` reads them when
the file uses only the keys typical sites set and every value is one the model takes
as it is.  It never reports an error: anything it is not sure of returns None, and the
caller then goes through `oci_conf.parse_oci_conf`, which accepts or words the problem.
"""

from __future__ import annotations

from scrun_py.base.errors import OciConfError
from scrun_py.base.flags import level_word
from scrun_py.site.patterns import unknown_tokens

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import Any

TRUE_WORDS = ("yes", "true", "1")
FALSE_WORDS = ("no", "false", "0")
RUN_SET = ("RunTimeRun", "RunTimeKill", "RunTimeDelete")
CREATE_SET = ("RunTimeCreate", "RunTimeStart", "RunTimeQuery", "RunTimeKill", "RunTimeDelete")
RUNTIME_KEYS = ("RunTimeCreate", "RunTimeDelete", "RunTimeKill", "RunTimeQuery", "RunTimeRun",
                "RunTimeStart")
_LEVEL_KEYS = ("StdIODebug", "FileDebug", "SyslogDebug")
_PLAIN_KEYS = frozenset((*RUNTIME_KEYS, *_LEVEL_KEYS, "SrunPath", "SrunArgs",
                         "IgnoreFileConfigJson"))

_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.")


def match_pair(line: str, pos: int) -> tuple[str, str, int] | None:
    """One Key=Value pair at `pos`, as Slurm's s_p parser reads it: spaces, the key
    (letters, digits, `_`, `.`), optional spaces around "=", then the value, either
    double-quoted (no escapes) or a run of characters that are neither spaces nor
    quotes, followed by a space or the end of the line.  (key as written, value,
    where the pair ends), or None.  By hand rather than with re: `create` reads
    oci.conf on its critical path, and re costs it over 1 ms of import time."""
    end = len(line)
    i = pos
    while i < end and line[i].isspace():
        i += 1
    j = i
    while j < end and line[j] in _KEY_CHARS:
        j += 1
    if j == i:
        return None
    k = j
    while k < end and line[k].isspace():
        k += 1
    if k == end or line[k] != "=":
        return None
    k += 1
    while k < end and line[k].isspace():
        k += 1
    if k < end and line[k] == '"':
        close = line.find('"', k + 1)
        if close < 0:
            return None
        value, stop = line[k + 1:close], close + 1
    else:
        stop = k
        while stop < end and not line[stop].isspace() and line[stop] != '"':
            stop += 1
        if stop == k:
            return None
        value = line[k:stop]
    if stop < end and not line[stop].isspace():
        return None
    return line[i:j], value, stop


def read_text(path: str | os.PathLike[str]) -> str:
    """oci.conf's text; a missing or unreadable file is an ``OciConfError``.  (A string
    path: `create` reads it on its critical path, without pathlib.)"""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise OciConfError(f"oci.conf: not found: {path}") from None
    except UnicodeDecodeError:
        raise OciConfError(f"{path}: not valid utf-8") from None
    except OSError as exc:
        raise OciConfError(f"oci.conf: cannot read {path}: {exc.strerror}") from None


def pairs(text: str) -> list[tuple[int, str, str]] | None:
    """Every ``(line, key as written, value)`` in file order; None when a line is not
    plain Key=Value pairs (the full parser words the problem)."""
    out: list[tuple[int, str, str]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0]
        if "\\" in line:
            return None
        pos = 0
        while line[pos:].strip():
            found = match_pair(line, pos)
            if found is None:
                return None
            key, value, pos = found
            if value == "":
                return None
            out.append((lineno, key, value))
    return out


def plain_settings(text: str) -> dict[str, Any] | None:
    """The anchor's runtime settings (`anchor.handoff.RuntimeSettings` fields), or None
    when the file needs the full model (other keys, any doubtful value)."""
    found = pairs(text)
    if found is None:
        return None
    canonical = {key.lower(): key for key in _PLAIN_KEYS}
    data: dict[str, str] = {}
    srun_args: list[str] = []
    for _line, written, value in found:
        key = canonical.get(written.lower())
        if key is None:
            return None
        if key == "SrunArgs":
            srun_args.append(value)
        else:  # Slurm: a repeated key keeps its latest value
            data[key] = value
    if any(unknown_tokens(data[key]) for key in RUNTIME_KEYS if key in data):
        return None
    ignore = False
    if "IgnoreFileConfigJson" in data:
        word = data["IgnoreFileConfigJson"].lower()
        if word not in TRUE_WORDS + FALSE_WORDS:
            return None
        ignore = word in TRUE_WORDS
    levels: dict[str, str | None] = {}
    for key in _LEVEL_KEYS:
        try:
            levels[key] = level_word(data[key]) if key in data else None
        except ValueError:
            return None
    given = {key for key in RUNTIME_KEYS if key in data}
    has_run = "RunTimeRun" in given
    has_create = bool(given & {"RunTimeCreate", "RunTimeStart"})
    if not ignore and not (
            (has_run and not has_create and set(RUN_SET) <= given)
            or (has_create and not has_run and set(CREATE_SET) <= given)):
        return None
    return {"runtime_kill": data.get("RunTimeKill"), "ignore_file_config_json": ignore,
            "srun_path": data.get("SrunPath", "srun"), "srun_args": srun_args,
            "stdio_debug": levels["StdIODebug"], "file_debug": levels["FileDebug"],
            "syslog_debug": levels["SyslogDebug"]}
