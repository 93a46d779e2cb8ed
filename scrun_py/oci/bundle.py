"""Load and validate an OCI bundle's config.json (the fields scrun-py reads).

The model types only what we use; unknown fields are kept in `Bundle.raw`.
A config.json whose fields already have exactly the model's types (what engines
write) is read without pydantic (`_plain_config`); anything else goes through the
pydantic model, which coerces or rejects it and words the error.  Constructing a
model does no I/O; `load_bundle` reads the file.

Paths are strings: `create` reads the bundle on its critical path, and pathlib (with
urllib.parse, ipaddress, fnmatch and re) is an import it does without (base/lean.py).
"""

from __future__ import annotations

import os

from scrun_py.base.errors import BundleError
from scrun_py.base.records import NamedTuple
from scrun_py.container import fastjson

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from typing import Any

    from pydantic import ValidationError

# SemVer 2.0.0 (semver.org), which the runtime spec requires of ociVersion
_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = (r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
           rf"(?:-{_IDENT}(?:\.{_IDENT})*)?"
           r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?")
#: the runtime spec's major version: the only one there is, and the one scrun-py runs
SPEC_MAJOR = 1
#: the PATH runc and crun look a program up on when process.env has none
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: the largest config.json scrun-py reads: an engine's is a few tens of kB; the cap keeps
#: a huge or endless file from taking create's memory and time
MAX_CONFIG_BYTES = 16 << 20


def program_in_rootfs(args: list[str], env: list[str], rootfs: str,
                      cwd: str = "/") -> list[str]:
    """`args` with its program named as the runtime finds it inside the container, for
    srun, which resolves it on the login node before slurmstepd hands it to the runtime.

    A name without ``/`` becomes its path inside `rootfs`, found on the container's PATH
    (process.env's, else DEFAULT_PATH): srun (from 23.02) looks it up on the login node's
    PATH and hands the container that host path (`sh` becomes /usr/bin/sh, which a
    busybox image does not have).  A relative path with a ``/`` (``./pause``) becomes
    absolute under the container's working directory `cwd` (process.cwd), where the
    runtime resolves it: srun (24.11) puts its own working directory in front of it.  An
    absolute path is left alone; `args` unchanged when the name is not found (the runtime
    then reports it, as it would)."""
    if not args or not args[0] or args[0].startswith("/"):
        return args
    if "/" in args[0]:
        if not cwd.startswith("/"):
            return args
        return [os.path.join(cwd, args[0]), *args[1:]]
    path = next((e[5:] for e in reversed(env) if e.startswith("PATH=")), DEFAULT_PATH)
    for directory in path.split(":"):
        if directory.startswith("/") and os.path.lexists(
                os.path.join(rootfs, directory.lstrip("/"), args[0])):
            return [os.path.join(directory, args[0]), *args[1:]]
    return args


class RootConfig(NamedTuple):
    path: str
    readonly: bool = False


class ProcessConfig(NamedTuple):
    args: list[str]
    env: list[str]
    terminal: bool = False
    cwd: str = "/"


class OciConfig(NamedTuple):
    """The validated fields of config.json that scrun-py reads."""

    ociVersion: str  # noqa: N815 - the JSON key
    root: RootConfig
    process: ProcessConfig
    annotations: dict[str, str]


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is str for v in value)


def _plain_config(raw: dict[str, Any]) -> OciConfig | None:
    """The config when every field we read has exactly its type (nothing to coerce,
    nothing to report); None sends the config through the pydantic model."""
    root, process = raw.get("root"), raw.get("process")
    annotations = raw.get("annotations", {})
    if not (type(raw.get("ociVersion")) is str and type(root) is dict
            and type(process) is dict and type(annotations) is dict):
        return None
    path, readonly = root.get("path"), root.get("readonly", False)
    args, env = process.get("args"), process.get("env", [])
    terminal, cwd = process.get("terminal", False), process.get("cwd", "/")
    if not (type(path) is str and type(readonly) is bool and _is_str_list(args) and args
            and _is_str_list(env) and type(terminal) is bool and type(cwd) is str
            and all(type(k) is str and type(v) is str for k, v in annotations.items())):
        return None
    return OciConfig(ociVersion=raw["ociVersion"], root=RootConfig(path, readonly),
                     process=ProcessConfig(list(args), list(env), terminal, cwd),
                     annotations=dict(annotations))


def _model_config(raw: dict[str, Any]) -> OciConfig:
    """Validate through pydantic (coercion and error wording); raises ValidationError."""
    from pydantic import BaseModel, ConfigDict, field_validator

    class _Root(BaseModel):
        model_config = ConfigDict(extra="allow")
        path: str
        readonly: bool = False

    class _Process(BaseModel):
        model_config = ConfigDict(extra="allow")
        args: list[str]
        env: list[str] = []
        terminal: bool = False
        cwd: str = "/"

        @field_validator("args")
        @classmethod
        def _args_not_empty(cls, v: list[str]) -> list[str]:
            if not v:
                raise ValueError("must not be empty")
            return v

    class _Config(BaseModel):
        model_config = ConfigDict(extra="allow")
        ociVersion: str  # noqa: N815 - the JSON key
        root: _Root
        process: _Process
        annotations: dict[str, str] = {}

    cfg = _Config.model_validate(raw)
    return OciConfig(ociVersion=cfg.ociVersion,
                     root=RootConfig(cfg.root.path, cfg.root.readonly),
                     process=ProcessConfig(list(cfg.process.args), list(cfg.process.env),
                                           cfg.process.terminal, cfg.process.cwd),
                     annotations=dict(cfg.annotations))


class Bundle(NamedTuple):
    path: str  # absolute
    config: OciConfig
    rootfs: str  # absolute, normalised
    raw: dict[str, Any]

    @property
    def config_file(self) -> str:
        return os.path.join(self.path, "config.json")


def _shown(text: str) -> str:
    """`text` for a one-line message: as it is, or quoted with escapes when it holds a
    line break or another unprintable character (config.json's strings may)."""
    return text if text.isprintable() else repr(text)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = _shown(".".join(str(p) for p in err["loc"]) or "config")
    msg = _shown(str(err["msg"]))
    if err["type"] == "missing":
        return f"{where} is required"
    if err["type"] in ("model_type", "dict_type"):
        # pydantic's text names our private model classes ("instance of _Root").
        return f"{where}: input should be an object"
    return f"{where}: {msg[0].lower() + msg[1:]}"


def oci_version_problem(version: str) -> str:
    """Why `version` is not an ociVersion scrun-py runs, or "" when it is one.

    The runtime spec requires a SemVer 2.0.0 string and lets a runtime refuse a
    version it does not support: only major version 1 exists.
    """
    parts = version.split(".")
    if len(parts) == 3 and all(p.isascii() and p.isdigit() and (p == "0" or p[0] != "0")
                               for p in parts):
        major = parts[0]  # the common case, without compiling the pattern (re is lazy)
    else:
        import re

        match = re.fullmatch(_SEMVER, version, re.ASCII)
        if match is None:
            return f"ociVersion {version!r} is not a SemVer 2.0.0 version"
        major = match.group(1)
    if int(major) != SPEC_MAJOR:
        return f"ociVersion {version!r} is not supported (only {SPEC_MAJOR}.x)"
    return ""


def nul_problem(label: str, values: list[str], *, env: bool = False) -> str:
    """`LABEL[N]: contains a NUL byte` for the first of `values` that holds one (with the
    entry's variable name when `env`), or "": no argv word, environment entry or path
    can hold one (the kernel's strings end there; os refuses them)."""
    for n, value in enumerate(values):
        if "\0" in value:
            name = f" ({_shown(value.partition('=')[0])})" if env else ""
            return f"{label}[{n}]{name}: contains a NUL byte"
    return ""


def process_problem(config: OciConfig) -> str:
    """Why config.json holds a string that cannot reach the processes it is meant for, or
    "": a NUL byte in process.args (srun's argv), process.env (the imported SCRUN_* and
    SLURM_* entries go into the environment of salloc, srun and the hooks; every entry
    into the container's), process.cwd or an annotation, and an annotation key with a
    `=`: each is `SCRUN_ANNOTATION_<key>=<value>` in the job's environment."""
    process = config.process
    problem = (nul_problem("process.args", process.args)
               or nul_problem("process.env", process.env, env=True))
    if problem:
        return problem
    if "\0" in process.cwd:
        return "process.cwd: contains a NUL byte"
    for key, value in config.annotations.items():
        if "\0" in key:
            return f"annotations: key {key!r} contains a NUL byte"
        if "=" in key:
            return (f"annotations: key {key!r} contains '=', which no environment "
                    "variable's name (SCRUN_ANNOTATION_<key>) may")
        if "\0" in value:
            return f"annotations[{key!r}]: contains a NUL byte"
    return ""


def _json_loads(data: bytes) -> Any:
    """json.loads, through the C scanner without importing json (create's critical path);
    a document that is not valid JSON is parsed again by json for its exact message."""
    try:
        return fastjson.loads(data)
    except ValueError:
        import json

        return json.loads(data)


def read_config(bundle: str) -> bytes:
    """The bytes of `bundle`/config.json: a regular file of at most MAX_CONFIG_BYTES,
    else BundleError.  Read through base/callerpath: opened with O_NONBLOCK, so that a
    FIFO in its place is refused instead of waiting for a writer, never through another
    user's symlink; at most the cap and one byte are read, so that a file that grows
    after the fstat is refused too.  OSError when it cannot be opened."""
    from scrun_py.base import callerpath

    name = _shown(bundle)
    try:
        return callerpath.read(os.path.join(bundle, "config.json"), MAX_CONFIG_BYTES,
                               "config.json")
    except callerpath.Refused as exc:
        import errno

        if exc.errno == errno.EFBIG:
            raise BundleError(_too_large(name, exc.size)) from None
        raise BundleError(f"bundle {name}: config.json is {exc.strerror}") from None


def _too_large(name: str, size: int | None) -> str:
    """The error for a config.json over the cap (`size` None: it grew past it while
    being read)."""
    if size is None:
        return (f"bundle {name}: config.json is more than the {MAX_CONFIG_BYTES} bytes "
                "scrun-py reads")
    return (f"bundle {name}: config.json is {size} bytes, more than the "
            f"{MAX_CONFIG_BYTES} scrun-py reads")


def load_bundle(path: str | os.PathLike[str]) -> Bundle:
    bundle = os.path.abspath(path)
    name = _shown(bundle)
    if not os.path.isdir(bundle):
        raise BundleError(f"bundle {name}: not a directory")
    try:
        raw: Any = _json_loads(read_config(bundle))
    except FileNotFoundError as exc:
        raise BundleError(f"bundle {name}: config.json not found") from exc
    except PermissionError as exc:
        raise BundleError(f"bundle {name}: config.json is not readable") from exc
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # Recursion: "[[[[…"
        raise BundleError(f"bundle {name}: config.json is not valid JSON: {exc}") from exc
    except OSError as exc:
        raise BundleError(f"bundle {name}: cannot read config.json: {exc.strerror}") from exc
    if not isinstance(raw, dict):
        raise BundleError(f"bundle {name}: config.json must be a JSON object")
    config = _plain_config(raw)
    if config is None:
        from pydantic import ValidationError

        try:
            config = _model_config(raw)
        except ValidationError as exc:
            raise BundleError(f"bundle {name}: config.json: {_first_error(exc)}") from exc
    problem = oci_version_problem(config.ociVersion) or process_problem(config)
    if problem:
        raise BundleError(f"bundle {name}: config.json: {problem}")
    rootfs = os.path.normpath(os.path.join(bundle, config.root.path))
    if not os.path.isdir(rootfs):
        raise BundleError(f"bundle {name}: rootfs {_shown(rootfs)} is not a directory")
    return Bundle(path=bundle, config=config, rootfs=rootfs, raw=raw)


def bundle_rootfs_problem(bundle_dir: str, release: str) -> str:
    """Why a slurmstepd that runs BUNDLE/rootfs whatever config.json's root.path says
    (Slurm 22.05) would run another rootfs than the config names, or "".  A bundle this
    host cannot read is left to the node ("")."""
    used = os.path.join(bundle_dir, "rootfs")
    try:
        path = _json_loads(read_config(bundle_dir))["root"]["path"]
        # ValueError also for a path with a NUL, which no file has
        if not isinstance(path, str) or (
                os.path.realpath(os.path.join(bundle_dir, path)) == os.path.realpath(used)):
            return ""
    except (BundleError, OSError, ValueError, LookupError, TypeError, RecursionError):
        return ""
    return (f"bundle {_shown(bundle_dir)}: Slurm {release} runs the container from "
            f"{_shown(used)}, not from root.path {path!r}")


def write_config(bundle: Bundle, config: dict[str, Any]) -> None:
    """Replace the bundle's config.json atomically (spool.write_atomic), keeping its mode
    and, as root, its owner."""
    import json

    from scrun_py.container.spool import write_atomic

    target = bundle.config_file
    try:
        st = os.stat(target)
        write_atomic(target, json.dumps(config).encode(), st.st_mode & 0o7777,
                     owner=(st.st_uid, st.st_gid) if os.getuid() == 0 else None)
    except OSError as exc:
        raise BundleError(f"bundle {bundle.path}: cannot rewrite config.json: "
                          f"{exc.strerror}") from exc
