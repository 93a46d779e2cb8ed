"""oci.conf read without pydantic: its ``Key=Value`` syntax, every key of oci.conf(5)
checked as the model in `site/oci_conf.py` checks it, and nothing else.

`create` reads oci.conf on its critical path, and importing the model (pydantic) is the
costliest import it could make (base/lean.py). `read_fields` reads every key Slurm
knows, in any capitalization: the 20 of `FIELDS`, the keys of 24.11, 25.11 and 26.05
(22.05 knows 8 of them: ContainerPath, CreateEnvFile and the RunTime* patterns; "OCI
Pattern" in oci.conf(5) is the section on the % tokens, not a key). It returns the
values the model would hold (`OciConf.model_dump()`), and never reports an error: a line
it cannot read, an unknown key, a value the model refuses or one it is not sure of, or a
file without a valid mode, returns None, and the caller then goes through
`oci_conf.parse_oci_conf`, which accepts the file or words the problem. So it never
accepts a file the model refuses (tests/unit/test_oci_conf_syntax.py holds the two to
the same answers).

EnvExclude and RunTimeEnvExclude are regular expressions, which the model compiles with
Python's re.  re is not imported here: its import costs more than this whole read
(base/lean.py), and `create` does not use the expressions (slurmstepd applies them on
the nodes).
`regex_compiles` checks them by hand instead: it accepts a plain subset of the syntax
(literal characters, ".", "^", "$", "|", groups that do not start with "(?", bracket
expressions, and one "*", "+", "?" or "{m}", "{m,}", "{m,n}" after an item that can
repeat) whose every member re compiles, and says False for anything else (a backslash,
"(?", a lazy or doubled quantifier, a "{" that is not a repeat, deep nesting).  Slurm's
documented expressions are in the subset; an expression outside it goes to the model,
which compiles it and words any error.  A test holds `regex_compiles` to re.compile over
every expression of up to 3 characters of the syntax's alphabet (4 of a smaller one) and
over longer generated ones.
"""

from __future__ import annotations

from scrun_py.base.errors import OciConfError
from scrun_py.base.flags import level_word
from scrun_py.site.patterns import unknown_tokens

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    import os
    from collections.abc import Mapping
    from typing import Any

TRUE_WORDS = ("yes", "true", "1")
FALSE_WORDS = ("no", "false", "0")
RUN_SET = ("RunTimeRun", "RunTimeKill", "RunTimeDelete")
CREATE_SET = ("RunTimeCreate", "RunTimeStart", "RunTimeQuery", "RunTimeKill", "RunTimeDelete")
RUNTIME_KEYS = ("RunTimeCreate", "RunTimeDelete", "RunTimeKill", "RunTimeQuery", "RunTimeRun",
                "RunTimeStart")
# OCI runtime-spec hook types (config.json "hooks" keys): DisableHooks' words.
HOOK_TYPES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart",
              "poststop")

# Every oci.conf key (Slurm's spelling) -> (the model's field, how its value is checked).
FIELDS: dict[str, tuple[str, str]] = {
    "ContainerPath": ("container_path", "pattern"),
    "CreateEnvFile": ("create_env_file", "env_file"),
    "DebugFlags": ("debug_flags", "string"),
    "DisableCleanup": ("disable_cleanup", "bool"),
    "DisableHooks": ("disable_hooks", "hooks"),
    "EnvExclude": ("env_exclude", "regex"),
    "FileDebug": ("file_debug", "level"),
    "IgnoreFileConfigJson": ("ignore_file_config_json", "bool"),
    "MountSpoolDir": ("mount_spool_dir", "pattern"),
    "RunTimeCreate": ("runtime_create", "pattern"),
    "RunTimeDelete": ("runtime_delete", "pattern"),
    "RunTimeEnvExclude": ("runtime_env_exclude", "regex"),
    "RunTimeKill": ("runtime_kill", "pattern"),
    "RunTimeQuery": ("runtime_query", "pattern"),
    "RunTimeRun": ("runtime_run", "pattern"),
    "RunTimeStart": ("runtime_start", "pattern"),
    "SrunArgs": ("srun_args", "list"),
    "SrunPath": ("srun_path", "string"),
    "StdIODebug": ("stdio_debug", "level"),
    "SyslogDebug": ("syslog_debug", "level"),
}
_CANONICAL = {key.lower(): key for key in FIELDS}
# the model's values for keys the file does not set (lists are made anew for each read)
_DEFAULTS: dict[str, Any] = {"create_env_file": "disabled", "disable_cleanup": False,
                             "ignore_file_config_json": False, "srun_path": "srun"}
_ENV_FILE_WORDS = {"true": "null", "y": "null", "yes": "null", "1": "null",
                   "false": "disabled", "n": "disabled", "no": "disabled", "0": "disabled",
                   "null": "null", "newline": "newline", "disabled": "disabled"}
_HOOK_WORDS = {name.lower(): name for name in HOOK_TYPES}

_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.")
_DIGITS = "0123456789"
# regex_compiles' limits: deeper or more groups are left to re (its parser recurses)
_MAX_DEPTH = 16
_MAX_GROUPS = 64


def match_pair(line: str, pos: int) -> tuple[str, str, int] | None:
    """One Key=Value pair at `pos`, as Slurm's s_p parser reads it: spaces, the key
    (letters, digits, `_`, `.`), optional spaces around "=", then the value, either
    double-quoted (no escapes) or a run of characters that are neither spaces nor
    quotes, followed by a space or the end of the line.  (key as written, value,
    where the pair ends), or None.  By hand rather than with re: `create` reads
    oci.conf on its critical path (re's cost: base/lean.py)."""
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


def oci_conf_path(slurm_conf: str | os.PathLike[str]) -> str:
    """Where oci.conf is: beside slurm.conf (Slurm's rule, configless mode included).  A
    string (`create` finds it on its critical path, without pathlib)."""
    import os

    return os.path.join(os.path.dirname(slurm_conf), "oci.conf")


def read_text(path: str | os.PathLike[str]) -> str:
    """oci.conf's text; a missing or unreadable file is an ``OciConfError``.  (A string
    path: `create` reads it on its critical path, without pathlib.)"""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise OciConfError(missing_text(str(path))) from None
    except UnicodeDecodeError:
        raise OciConfError(f"{path}: not valid utf-8") from None
    except OSError as exc:
        raise OciConfError(f"oci.conf: cannot read {path}: {exc.strerror}") from None


def missing_text(path: str) -> str:
    """What a missing oci.conf means, and where scrun-py looked: it is read beside the
    slurm.conf in use (base/conf_lookup.py), which may be missing too, or not found."""
    import os

    from scrun_py.base import conf_lookup

    conf = os.path.join(os.path.dirname(path), "slurm.conf")
    if os.path.exists(conf):
        where = f"beside {conf}, the slurm.conf in use"
        if conf_lookup.in_configless_dir(conf):
            where += (", a configless copy: slurmctld ships oci.conf with it when its "
                      "own configuration directory has one (Slurm 23.11+)")
    else:
        choice = conf_lookup.find(None, os.environ)
        if not choice.found and os.path.dirname(choice.path) == os.path.dirname(path):
            return f"oci.conf: not found: it is read beside slurm.conf, and {choice.not_found()}"
        where = f"beside the slurm.conf in use, and {conf} is missing too"
    return (f"oci.conf: not found: {path} (it is read {where}; name another slurm.conf "
            "with -f or SLURM_CONF)")


class PairError(ValueError):
    """Why line `lineno` of oci.conf is not plain Key=Value pairs of known keys:
    `problem` is "backslash", "syntax" (`rest`: the unread end of the line, `key`: the
    key of the pair before it, if any), "unknown key" or "empty value" (`key` as
    written).  oci_conf.parse_oci_conf words it; read_fields leaves the file to it."""

    def __init__(self, lineno: int, problem: str, key: str = "", rest: str = "") -> None:
        super().__init__(problem)
        self.lineno, self.problem, self.key, self.rest = lineno, problem, key, rest


def pairs(text: str, canonical: Mapping[str, str]) -> list[tuple[int, str, str, str]]:
    """Every ``(line, key, key as written, value)`` in file order, the one reading of
    oci.conf's lines (for read_fields and oci_conf.parse_oci_conf): `key` is the
    spelling `canonical` gives the lowercased key.  PairError at the first problem."""
    out: list[tuple[int, str, str, str]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        # Slurm cuts at the first "#" even inside quotes, and strips backslash escapes;
        # we refuse backslashes instead of guessing what an escape meant.
        line = raw.split("#", 1)[0]
        if "\\" in line:
            raise PairError(lineno, "backslash")
        pos, written = 0, ""
        while line[pos:].strip():
            found = match_pair(line, pos)
            if found is None:
                raise PairError(lineno, "syntax", written, line[pos:])
            written, value, pos = found
            key = canonical.get(written.lower())
            if key is None:
                raise PairError(lineno, "unknown key", written)
            if value == "":
                raise PairError(lineno, "empty value", written)
            out.append((lineno, key, written, value))
    return out


def read_fields(text: str) -> dict[str, Any] | None:
    """Every field of the model (`OciConf.model_dump()`: defaults for keys not set),
    read without pydantic; None when the model must decide (any doubt, any problem)."""
    try:
        found = pairs(text, _CANONICAL)
    except PairError:
        return None
    data: dict[str, str] = {}
    srun_args: list[str] = []
    for _line, key, _written, value in found:
        if key == "SrunArgs":
            srun_args.append(value)
        else:  # Slurm: a repeated key keeps its latest value
            data[key] = value
    fields: dict[str, Any] = {name: _DEFAULTS.get(name) for name, _ in FIELDS.values()}
    fields["disable_hooks"] = []
    fields["srun_args"] = srun_args
    for key, value in data.items():
        name, kind = FIELDS[key]
        checked = _check(kind, value)
        if checked is None:
            return None
        fields[name] = checked
    if not fields["ignore_file_config_json"] and not _mode_ok(set(data) & set(RUNTIME_KEYS)):
        return None
    return fields


def _check(kind: str, value: str) -> object:
    """`value` as the model holds it after its validators; None when it refuses it (or
    this reader is not sure it takes it)."""
    if kind == "pattern":
        return None if unknown_tokens(value) else value
    if kind == "bool":
        word = value.lower()
        return word in TRUE_WORDS if word in TRUE_WORDS or word in FALSE_WORDS else None
    if kind == "level":
        try:
            return level_word(value)
        except ValueError:
            return None
    if kind == "env_file":
        return _ENV_FILE_WORDS.get(value.lower())
    if kind == "hooks":
        hooks = []
        for name in (n.strip() for n in value.split(",")):
            if name:
                if name.lower() not in _HOOK_WORDS:
                    return None
                hooks.append(_HOOK_WORDS[name.lower()])
        return hooks
    if kind == "regex":
        return value if regex_compiles(value) else None
    return value  # "string": any non-empty value


def _mode_ok(given: set[str]) -> bool:
    """The model's mode rule (without IgnoreFileConfigJson): run mode or create/start
    mode, complete, not both."""
    has_run = "RunTimeRun" in given
    has_create = bool(given & {"RunTimeCreate", "RunTimeStart"})
    if has_run and not has_create:
        return set(RUN_SET) <= given
    if has_create and not has_run:
        return set(CREATE_SET) <= given
    return False


def regex_compiles(pattern: str) -> bool:
    """Whether Python's re surely compiles `pattern`, decided without re: True only for
    the plain subset the module docstring describes; False means not sure."""
    end = len(pattern)
    i = depth = groups = 0
    repeatable = False  # whether the last item may take a quantifier
    while i < end:
        c = pattern[i]
        i += 1
        if c == "\\":
            return False
        if c == "(":
            if i < end and pattern[i] == "?":
                return False
            depth += 1
            groups += 1
            if depth > _MAX_DEPTH or groups > _MAX_GROUPS:
                return False
            repeatable = False
        elif c == ")":
            if not depth:
                return False
            depth -= 1
            repeatable = True
        elif c in "|^$":
            repeatable = False
        elif c in "*+?{":
            if c == "{":
                i = _repeat_end(pattern, i)
            if i < 0 or not repeatable:
                return False
            repeatable = False  # a second quantifier (lazy, possessive, doubled): not sure
        elif c == "[":
            i = _set_end(pattern, i)
            if i < 0:
                return False
            repeatable = True
        else:
            repeatable = True
    return not depth


def _repeat_end(pattern: str, i: int) -> int:
    """Where "{m}", "{m,}" or "{m,n}" (m <= n, at most 4 digits each) that starts before
    `i` ends; -1 for anything else (re may read it as a literal "{", or refuse it)."""
    end = len(pattern)
    j = i
    while j < end and j - i < 5 and pattern[j] in _DIGITS:
        j += 1
    low = pattern[i:j]
    if not low or len(low) > 4:
        return -1
    high = low
    if j < end and pattern[j] == ",":
        k = j = j + 1
        while j < end and j - k < 5 and pattern[j] in _DIGITS:
            j += 1
        high = pattern[k:j]
        if len(high) > 4:
            return -1
    if j >= end or pattern[j] != "}" or (high and int(high) < int(low)):
        return -1
    return j + 1


def _set_end(pattern: str, i: int) -> int:
    """Where the bracket expression opened before `i` ends, read as re reads one
    without escapes (a "]" first is a literal, "a-z" a range whose end is not below
    its start, a "-" before the closing "]" a literal); -1 when it does not end or a
    range runs backwards."""
    end = len(pattern)
    j = i + 1 if i < end and pattern[i] == "^" else i
    first = True
    while j < end:
        c = pattern[j]
        j += 1
        if c == "]" and not first:
            return j
        if c == "\\":
            return -1
        first = False
        if j < end and pattern[j] == "-":
            if j + 1 >= end:
                return -1
            high = pattern[j + 1]
            j += 2
            if high == "]":
                return j
            if high == "\\" or high < c:
                return -1
    return -1
