"""oci.conf: Slurm's ``Key=Value`` syntax parsed into a validated, frozen ``OciConf``.

Owns the full validation and the wording of its errors (one line each).  `create`
reads oci.conf with ``oci_conf_syntax.read_fields`` (no pydantic) and comes here only for
a file that reader is not sure of: this model then accepts it or words the problem.
``scrun-py doctor`` reads oci.conf here.  Only ``load_oci_conf`` touches the disk;
nothing here expands patterns (``site/patterns.py``) or runs commands.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from scrun_py.base.errors import OciConfError
from scrun_py.base.flags import LADDER, level_word
from scrun_py.site.oci_conf_syntax import CREATE_SET as _CREATE_SET
from scrun_py.site.oci_conf_syntax import FALSE_WORDS as _FALSE_WORDS
from scrun_py.site.oci_conf_syntax import HOOK_TYPES as _HOOK_TYPES
from scrun_py.site.oci_conf_syntax import RUN_SET as _RUN_SET
from scrun_py.site.oci_conf_syntax import TRUE_WORDS as _TRUE_WORDS
from scrun_py.site.oci_conf_syntax import PairError, pairs, read_text
from scrun_py.site.patterns import tokens_in, unknown_tokens

Mode = Literal["run", "create-start", "ignore-config-json"]

# CHANGELOG 23.02.0rc1; 22.05 slurmstepd fatals on these (checked on the test cluster).
# DisableCleanup too: 22.05's read_oci_conf.c knows only ContainerPath, CreateEnvFile and
# the RunTime* keys.
_ADDED_23_02 = ("DebugFlags", "DisableCleanup", "DisableHooks", "EnvExclude", "FileDebug",
                "IgnoreFileConfigJson", "MountSpoolDir", "RunTimeEnvExclude", "SrunArgs",
                "SrunPath", "StdIODebug", "SyslogDebug")
_TOKENS_ADDED = (("%p", (23, 2)), ("%U", (23, 2)), ("%Z", (26, 5)))

_RUNTIME_FIELDS = (("runtime_create", "RunTimeCreate"), ("runtime_delete", "RunTimeDelete"),
                   ("runtime_kill", "RunTimeKill"), ("runtime_query", "RunTimeQuery"),
                   ("runtime_run", "RunTimeRun"), ("runtime_start", "RunTimeStart"))
_PATTERN_FIELDS = ("container_path", "mount_spool_dir", *(name for name, _ in _RUNTIME_FIELDS))


def _fail(key: str, reason: str) -> NoReturn:
    """Raise a model-level error that still names the oci.conf key to blame."""
    raise PydanticCustomError("oci_mode", "{reason}", {"key": key, "reason": reason})


class OciConf(BaseModel):
    """Validated oci.conf.  Construct with ``parse_oci_conf``; aliases are Slurm's key names."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    container_path: str | None = Field(None, alias="ContainerPath")
    create_env_file: Literal["null", "newline", "disabled"] = Field(
        "disabled", alias="CreateEnvFile")
    debug_flags: str | None = Field(None, alias="DebugFlags")
    disable_cleanup: bool = Field(False, alias="DisableCleanup")
    disable_hooks: list[str] = Field(default_factory=list, alias="DisableHooks")
    env_exclude: str | None = Field(None, alias="EnvExclude")
    file_debug: str | None = Field(None, alias="FileDebug")
    ignore_file_config_json: bool = Field(False, alias="IgnoreFileConfigJson")
    mount_spool_dir: str | None = Field(None, alias="MountSpoolDir")
    runtime_create: str | None = Field(None, alias="RunTimeCreate")
    runtime_delete: str | None = Field(None, alias="RunTimeDelete")
    runtime_env_exclude: str | None = Field(None, alias="RunTimeEnvExclude")
    runtime_kill: str | None = Field(None, alias="RunTimeKill")
    runtime_query: str | None = Field(None, alias="RunTimeQuery")
    runtime_run: str | None = Field(None, alias="RunTimeRun")
    runtime_start: str | None = Field(None, alias="RunTimeStart")
    srun_args: list[str] = Field(default_factory=list, alias="SrunArgs")
    srun_path: str = Field("srun", alias="SrunPath")
    stdio_debug: str | None = Field(None, alias="StdIODebug")
    syslog_debug: str | None = Field(None, alias="SyslogDebug")

    @field_validator("create_env_file", mode="before")
    @classmethod
    def _create_env_file(cls, value: object) -> object:
        word = str(value).lower()
        if word in ("true", "y", "yes", "1"):
            return "null"
        if word in ("false", "n", "no", "0"):
            return "disabled"
        if word in ("null", "newline", "disabled"):
            return word
        raise ValueError("must be one of null, newline, disabled")

    @field_validator("disable_cleanup", "ignore_file_config_json", mode="before")
    @classmethod
    def _boolean(cls, value: object) -> object:
        if isinstance(value, bool):
            return value
        word = str(value).lower()
        if word in _TRUE_WORDS or word in _FALSE_WORDS:
            return word in _TRUE_WORDS
        raise ValueError("must be a boolean: yes, no, true, false, 1 or 0")

    @field_validator("file_debug", "stdio_debug", "syslog_debug", mode="before")
    @classmethod
    def _debug_level(cls, value: object) -> object:
        try:
            return level_word(str(value))
        except ValueError:
            raise ValueError(f"must be a debug level: {', '.join(LADDER)} or 0-9") from None

    @field_validator("disable_hooks", mode="before")
    @classmethod
    def _hooks(cls, value: object) -> object:
        if not isinstance(value, str | list):
            return value
        names = [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) \
            else value
        canonical = {h.lower(): h for h in _HOOK_TYPES}
        for name in names:
            if str(name).lower() not in canonical:
                raise ValueError(f"unknown hook type '{name}': use {', '.join(_HOOK_TYPES)}")
        return [canonical[str(n).lower()] for n in names]

    @field_validator("env_exclude", "runtime_env_exclude")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                with warnings.catch_warnings():  # "possible nested set" on POSIX [[:class:]]
                    warnings.simplefilter("ignore")
                    re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc.msg}") from None
        return value

    @field_validator(*_PATTERN_FIELDS)
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        bad = unknown_tokens(value) if value is not None else []
        if bad:
            raise ValueError(f"unknown pattern token {', '.join(repr(t) for t in bad)}")
        return value

    @field_validator("srun_args", mode="before")
    @classmethod
    def _srun_args(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _runtime_mode(self) -> OciConf:
        # Slurm's oci.conf loader: IgnoreFileConfigJson=true skips every mode check.
        if self.ignore_file_config_json:
            return self
        given = {alias for name, alias in _RUNTIME_FIELDS if getattr(self, name) is not None}
        has_run = "RunTimeRun" in given
        has_create = bool(given & {"RunTimeCreate", "RunTimeStart"})
        if not given:
            _fail("", "no RunTime* command is set: configure RunTimeRun, RunTimeKill and "
                  "RunTimeDelete (or set IgnoreFileConfigJson=true)")
        elif has_run != has_create:
            key, mode, required = ("RunTimeRun", "run mode", _RUN_SET) if has_run else (
                min(given & {"RunTimeCreate", "RunTimeStart"}), "create/start mode", _CREATE_SET)
            missing = [k for k in required if k not in given]
            if missing:
                _fail(key, f"{mode} also needs {', '.join(missing)}")
        elif has_run:
            _fail("RunTimeRun", "RunTimeRun and RunTimeCreate/RunTimeStart are mutually "
                  "exclusive: configure run mode or create/start mode, not both")
        else:
            _fail(min(given), "needs RunTimeRun (run mode) or RunTimeCreate and RunTimeStart "
                  "(create/start mode); the two modes are mutually exclusive")
        return self

    @property
    def mode(self) -> Mode:
        """``run`` (RunTimeRun), ``create-start``, or ``ignore-config-json`` (no checks)."""
        if self.ignore_file_config_json:
            return "ignore-config-json"
        return "run" if self.runtime_run is not None else "create-start"

    def supported_by(self, slurm_version: tuple[int, int]) -> list[str]:
        """Problems this config would hit on slurmstepd of ``slurm_version`` (informational)."""
        name = f"{slurm_version[0]}.{slurm_version[1]:02d}"
        if slurm_version < (21, 8):
            return [f"slurm {name} has no OCI container support (added in 21.08)"]
        problems: list[str] = []
        fields = type(self).model_fields
        given = [fields[f].alias or f for f in sorted(self.model_fields_set)]
        if slurm_version < (23, 2):
            problems += [f"{key}: unknown to slurm {name} (added in 23.02); slurmstepd fatals"
                         for key in sorted(set(given) & set(_ADDED_23_02))]
            if self.create_env_file == "newline":
                problems.append(f"CreateEnvFile: newline needs slurm 23.02 (slurm {name} "
                                "only knows true/false)")
            if self.mode == "run" and self.runtime_query is None:
                problems.append(f"RunTimeQuery: required by slurm {name} (optional since 23.02)")
        for field in _PATTERN_FIELDS:
            pattern = getattr(self, field)
            used = tokens_in(pattern) if pattern is not None else []
            problems += [f"{fields[field].alias}: {token} unknown to slurm {name} "
                         f"(added in {added[0]}.{added[1]:02d})"
                         for token, added in _TOKENS_ADDED
                         if token in used and slurm_version < added]
        if self.ignore_file_config_json and (self.runtime_create or self.runtime_start):
            problems.append("RunTimeCreate: create/start mode with IgnoreFileConfigJson=true "
                            "makes slurmstepd fail every step")
        if self.disable_hooks:
            problems.append("DisableHooks: has no effect in slurmstepd (parser bug); "
                            "hooks stay in config.json")
        if self.debug_flags:
            problems.append("DebugFlags: has no effect in scrun-py (its anchor runs no Slurm "
                            "code in-process; salloc and srun follow slurm.conf's DebugFlags "
                            "or SLURM_DEBUG_FLAGS)")
        return problems


def parse_oci_conf(text: str, source: str = "oci.conf") -> OciConf:
    """Parse and validate oci.conf ``text``; ``source`` names the file in error messages."""
    canonical = {(f.alias or n).lower(): f.alias or n for n, f in OciConf.model_fields.items()}
    data: dict[str, Any] = {}
    where: dict[str, tuple[int, str]] = {}  # alias -> (line, key as written)
    try:
        found = pairs(text, canonical)
    except PairError as exc:
        raise OciConfError(f"{source}:{exc.lineno}: {_pair_problem(exc)}") from None
    for lineno, key, written, value in found:
        if key == "SrunArgs":
            data.setdefault(key, []).append(value)
            where.setdefault(key, (lineno, written))
        else:  # Slurm: a repeated key keeps its latest value
            data[key] = value
            where[key] = (lineno, written)
    try:
        return OciConf.model_validate(data)
    except ValidationError as exc:
        err = OciConfError(_summary(exc, source, where))
        # Pure function: the full pydantic list rides along for the caller to log at debug.
        for detail in exc.errors(include_url=False):
            err.add_note(f"{'.'.join(map(str, detail['loc'])) or 'oci.conf'}: {detail['msg']}")
        raise err from None


def _pair_problem(exc: PairError) -> str:
    """What is wrong with the line `exc` names, in words."""
    if exc.problem == "backslash":
        return "backslash escapes and line continuations are not supported"
    if exc.problem == "syntax":
        return _syntax_problem(exc.rest, exc.key)
    return f"{exc.key}: {exc.problem}"


def _syntax_problem(rest: str, previous_key: str) -> str:
    """Explain why ``rest`` (the unparsed end of a line) is not a Key=Value pair."""
    head = re.match(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(.?)', rest)
    if head is None and previous_key:
        return f"{previous_key}: a value with spaces must be double-quoted"
    if head is None:
        return f"expected Key=Value, got {rest.strip()!r}"
    key, op, first = head.groups()
    if op:
        return f"{key}: '{op}=' is not supported in oci.conf"
    if first == "":
        return f"{key}: empty value"
    if first == '"':
        return f"{key}: unterminated or misplaced double quote"
    return f"{key}: values with spaces or quotes must be one double-quoted string"


def _summary(exc: ValidationError, source: str, where: dict[str, tuple[int, str]]) -> str:
    """One line for the first problem in file order: ``source:line: Key: reason``."""
    lines: list[tuple[float, str]] = []
    for err in exc.errors(include_url=False):
        key = str(err["loc"][0]) if err["loc"] else str((err.get("ctx") or {}).get("key", ""))
        lineno, written = where.get(key, (None, key))
        msg = err["msg"].removeprefix("Value error, ")
        prefix = f"{source}:{lineno}" if lineno is not None else source
        lines.append((lineno if lineno is not None else float("inf"),
                      f"{prefix}: {written}: {msg}" if written else f"{prefix}: {msg}"))
    return min(lines, key=lambda item: item[0])[1]


def load_oci_conf(path: str | Path) -> OciConf:
    """Read and parse ``path``; a missing or unreadable file is an ``OciConfError``."""
    return parse_oci_conf(read_text(path), source=str(path))
