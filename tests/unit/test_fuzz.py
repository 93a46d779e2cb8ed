"""Property-based fuzzing (Hypothesis) of what scrun-py reads from others: the control
requests the anchor serves, a bundle's config.json, a container's state.json, and the
command line of every verb.

Every suite runs a fixed, derandomized set of examples (FUZZ), so a run is repeatable
and takes seconds.  Nothing here talks to Slurm: the anchor side is the real
ControlServer in front of a stub lifecycle, and the command-line suite runs the verbs
in-process with Slurm's commands replaced by failing stand-ins, no loadable bundle
anywhere, and the start of an anchor made a recorded failure.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from scrun_py.base.errors import ScrunError
from scrun_py.base.layout import STATE_FILE, STATUSES
from scrun_py.container.handle import Container
from scrun_py.container.record import ContainerRecord

#: the budget of every suite: the same examples on every run, no example database,
#: no per-example deadline (a CI machine may be slow)
FUZZ = settings(derandomize=True, max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---- strategies ------------------------------------------------------------------------------

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats() | st.text(max_size=12))
#: any JSON value (NaN and the infinities included, as Python's json writes them)
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
EXTRA_KEYS = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3)


def _with_extra(fields: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """`fields` with a few more keys of any name and value (fields win)."""
    return st.builds(lambda extra, base: {**extra, **base}, EXTRA_KEYS, fields)


def _one_line(msg: str) -> bool:
    return 1 == len(msg.splitlines()) and msg.strip() == msg


# ---- (a) the control protocol, against a real ControlServer ----------------------------------

MAX_SIGNAL = 64  # anchor/server.py's range: 0..SIGRTMAX
#: what JSON can put where a small integer or a bool is expected
NEAR_MISSES: st.SearchStrategy[Any] = (
    st.booleans() | st.floats(min_value=-1, max_value=70)
    | st.sampled_from([1.0, 15.0, "15", "TERM", "true", "", None, [], {}, [15], 2**64,
                       -(2**63)])
    | JSON_VALUES)


def _mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Three times in four `common`, else `rare`."""
    return st.integers(min_value=0, max_value=3).flatmap(lambda n: rare if n == 3 else common)


REQUESTS = _with_extra(st.fixed_dictionaries(
    {"v": _mostly(st.just(1), JSON_VALUES),
     "type": _mostly(st.sampled_from(["start", "kill", "delete"]), JSON_VALUES)},
    optional={
        "signal": st.integers(min_value=-3, max_value=MAX_SIGNAL + 3) | NEAR_MISSES,
        "force": st.booleans() | NEAR_MISSES,
    }))


def _accepted(req: dict[str, Any]) -> bool:
    """Whether the anchor must carry `req` out: exactly version 1, a known type, and
    for kill an integer signal in range, for delete a bool force or none."""
    kind = req.get("type")
    if type(req.get("v")) is not int or req["v"] != 1 or not isinstance(kind, str):
        return False
    if kind == "start":
        return True
    if kind == "kill":
        sig = req.get("signal")
        return type(sig) is int and 0 <= sig <= MAX_SIGNAL
    if kind == "delete":
        return type(req.get("force", False)) is bool
    return False


class _StubLifecycle:
    """What ControlServer calls on the anchor's Lifecycle, recorded; nothing happens."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def start(self) -> int:
        self.calls.append(("start", None))
        return 42

    def kill(self, sig: int) -> None:
        self.calls.append(("kill", sig))

    def delete(self, force: bool) -> None:
        self.calls.append(("delete", force))


class _Served:
    def __init__(self, lc: _StubLifecycle, path: str) -> None:
        self.lc = lc
        self.path = path

    def ask(self, line: bytes) -> bytes:
        """Send `line`, end the request (EOF), return everything the server sent back."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(self.path)
            sock.sendall(line)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


@contextlib.contextmanager
def _control_server() -> Iterator[_Served]:
    """The real ControlServer on a unix socket in a private temporary directory."""
    import _socket

    from scrun_py.anchor.server import ControlServer
    from tests.unit.anchor_harness import quiet_logger

    tmp = tempfile.mkdtemp(prefix="scrun-fuzz-")
    path = os.path.join(tmp, "control.sock")
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    listener.bind(path)
    listener.listen(16)
    lc = _StubLifecycle()
    server = ControlServer(cast(Any, lc), listener, quiet_logger())
    server.start()
    try:
        yield _Served(lc, path)
    finally:
        server.close(grace_s=5.0)
        shutil.rmtree(tmp, ignore_errors=True)


def _check_reply(reply: bytes) -> dict[str, Any]:
    """One line of JSON: a version-1 object whose `ok` is the literal true or false."""
    assert reply.endswith(b"\n") and 1 == reply.count(b"\n"), reply
    obj = json.loads(reply)
    assert isinstance(obj, dict), reply
    assert (int, 1) == (type(obj.get("v")), obj.get("v")), reply
    assert type(obj.get("ok")) is bool, reply
    if not obj["ok"]:
        assert isinstance(obj.get("message"), str) and _one_line(obj["message"]), reply
        assert isinstance(obj.get("kind"), str), reply
    return obj


def _check_calls(lc: _StubLifecycle) -> None:
    """The lifecycle is asked only what its signature promises."""
    for name, arg in lc.calls:
        if name == "kill":
            assert type(arg) is int and 0 <= arg <= MAX_SIGNAL, lc.calls
        elif name == "delete":
            assert type(arg) is bool, lc.calls


def _still_serving(served: _Served) -> None:
    """A good request after the fuzzed one is carried out: the server did not die."""
    served.lc.calls.clear()
    assert {"v": 1, "ok": True} == _check_reply(served.ask(b'{"v":1,"type":"kill","signal":15}\n'))
    assert [("kill", 15)] == served.lc.calls


class TestControlProtocol:
    def test_json_requests(self) -> None:
        """Any JSON object as a request: one JSON reply line; ok exactly when the request
        is well-typed; the lifecycle sees only an int signal in range and a bool force."""
        with _control_server() as served:

            @FUZZ
            @given(req=REQUESTS)
            @example(req={"v": 1, "type": "kill", "signal": True})
            @example(req={"v": 1, "type": "kill", "signal": 15.0})
            @example(req={"v": 1, "type": "delete", "force": 1})
            @example(req={"v": 1, "type": "delete", "force": "false"})
            @example(req={"v": True, "type": "start"})
            @example(req={"v": 1, "type": ["kill"], "signal": 9})
            def check(req: dict[str, Any]) -> None:
                served.lc.calls.clear()
                obj = _check_reply(served.ask(json.dumps(req).encode() + b"\n"))
                _check_calls(served.lc)
                assert _accepted(req) == obj["ok"], (req, obj)
                assert (1 if obj["ok"] else 0) == len(served.lc.calls), (req, served.lc.calls)
                _still_serving(served)

            check()

    def test_arbitrary_bytes(self) -> None:
        """Any bytes as a request (with or without the newline): one JSON reply line,
        the lifecycle asked nothing ill-typed, the server still serves."""
        with _control_server() as served:

            @FUZZ
            @given(line=st.binary(max_size=300) | st.binary(max_size=300).map(
                lambda b: b + b"\n"))
            @example(line=b'{"v":1,"type":"kill","signal":' + b"9" * 5000 + b"}\n")
            @example(line=b'{"v":1,"type":"kill","signal":1e999}\n')
            @example(line=b'{"v":1,"type":"kill","signal":NaN}\n')
            @example(line=b"[" * 5000 + b"\n")
            @example(line=b'{"v":1,"type":"start"}\n{"v":1,"type":"start"}\n')
            @example(line=b'{"v":1,"type":"kill","signal":9}\xff\n')
            @example(line=b'\xef\xbb\xbf{"v":1,"type":"start"}\n')
            @example(line=b"")
            def check(line: bytes) -> None:
                served.lc.calls.clear()
                _check_reply(served.ask(line))
                _check_calls(served.lc)
                _still_serving(served)

            check()


# ---- (b) config.json, through load_bundle (what create reads the bundle with) ----------------

VALID_CONFIG = json.dumps({
    "ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": True},
    "process": {"args": ["sh", "-c", "true"], "env": ["PATH=/bin"], "cwd": "/",
                "terminal": False},
    "annotations": {"org.example/a": "1"}}).encode()
_TEXTS = st.text(max_size=10)
_DELETED = "<deleted>"  # a perturbation that removes the field


def _perturb(parts: tuple[dict[str, Any], list[tuple[tuple[str, ...], Any]]]) -> dict[str, Any]:
    doc, changes = parts
    doc = copy.deepcopy(doc)
    for path, value in changes:
        parent: Any = doc
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if value == _DELETED:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = value
    return doc


def _perturbed(documents: st.SearchStrategy[dict[str, Any]],
               paths: list[tuple[str, ...]]) -> st.SearchStrategy[dict[str, Any]]:
    """Well-typed `documents` with up to two of the fields at `paths` given a value of
    another type (NEAR_MISSES) or removed: mostly one field wrong, the rest right."""
    change = st.tuples(st.sampled_from(paths), st.just(_DELETED) | NEAR_MISSES)
    return st.tuples(documents, st.lists(change, max_size=2)).map(_perturb)


CONFIG_DOCUMENTS = _perturbed(_with_extra(st.fixed_dictionaries({
    "ociVersion": _mostly(st.sampled_from(["1.0.2", "1.0.0", "1.2.0-dev", "1.0.0-rc.1+b.5"]),
                          st.sampled_from(["2.0.0", "1.0", "invalid", "", "1.0.2\n"]) | _TEXTS),
    "root": st.fixed_dictionaries(
        {"path": _mostly(st.sampled_from(["rootfs", "rootfs/", "./rootfs"]),
                         st.sampled_from([".", "/", "missing", "rootfs\nx", "../x", "rootfs\x00"])
                         | _TEXTS)},
        optional={"readonly": st.booleans()}),
    "process": st.fixed_dictionaries(
        {"args": st.lists(_TEXTS, min_size=1, max_size=3)},
        optional={"env": st.lists(_TEXTS, max_size=3), "terminal": st.booleans(),
                  "cwd": _TEXTS})},
    optional={"annotations": st.dictionaries(_TEXTS, _TEXTS, max_size=3)})),
    [("ociVersion",), ("root",), ("root", "path"), ("root", "readonly"), ("process",),
     ("process", "args"), ("process", "env"), ("process", "terminal"), ("process", "cwd"),
     ("annotations",)])
CONFIG_BYTES = _mostly(
    CONFIG_DOCUMENTS.map(lambda doc: json.dumps(doc).encode()),
    JSON_VALUES.map(lambda doc: json.dumps(doc).encode()) | st.binary(max_size=300)
    | st.integers(min_value=0, max_value=len(VALID_CONFIG)).map(lambda n: VALID_CONFIG[:n]))


def _check_config(cfg: Any) -> None:
    """A loaded config has exactly the types the model promises."""
    assert type(cfg.ociVersion) is str
    assert type(cfg.root.path) is str and type(cfg.root.readonly) is bool
    args, env = cfg.process.args, cfg.process.env
    assert type(args) is list and args and all(type(a) is str for a in args)
    assert type(env) is list and all(type(e) is str for e in env)
    assert type(cfg.process.terminal) is bool and type(cfg.process.cwd) is str
    assert all(type(k) is str and type(v) is str for k, v in cfg.annotations.items())


class TestConfigJson:
    def test_any_config_json(self, tmp_path: Path) -> None:
        """Any bytes or JSON document as config.json: a bundle with well-typed fields, or
        a ScrunError with a one-line message; never another exception."""
        from scrun_py.oci.bundle import Bundle, bundle_rootfs_problem, load_bundle

        bundle = tmp_path / "bundle"
        (bundle / "rootfs").mkdir(parents=True)

        @FUZZ
        @given(data=CONFIG_BYTES)
        @example(data=VALID_CONFIG)
        @example(data=VALID_CONFIG.replace(b'"rootfs"', b'"rootfs\\nx"'))
        @example(data=VALID_CONFIG.replace(b'"org.example/a"', b'"a\\u2028b"').replace(
            b'"1"', b"1"))
        @example(data=VALID_CONFIG.replace(b'"1.0.2"', b'"1.0.2\\n"'))
        @example(data=b'{"ociVersion":"1.0.2","root":{"path":"rootfs"},'
                      b'"process":{"args":["sh"],"terminal":"yes"},"annotations":{"\\ud800":"x"}}')
        def check(data: bytes) -> None:
            (bundle / "config.json").write_bytes(data)
            try:
                loaded = load_bundle(bundle)
            except ScrunError as exc:
                assert _one_line(str(exc)), str(exc)
            else:
                assert isinstance(loaded, Bundle)
                _check_config(loaded.config)
                assert os.path.isdir(loaded.rootfs)
            problem = bundle_rootfs_problem(str(bundle), "22.05")
            assert isinstance(problem, str) and (not problem or _one_line(problem)), problem

        check()


# ---- (c) state.json, through Container.record() and .state_line() ----------------------------

RECORD_DOCUMENTS = _perturbed(_with_extra(st.fixed_dictionaries(
    {"id": st.just("c1"), "bundle": _TEXTS, "rootfs": _TEXTS,
     "status": st.sampled_from(sorted(STATUSES))},
    optional={
        "oci_version": _TEXTS, "annotations": st.dictionaries(_TEXTS, _TEXTS, max_size=3),
        "anchor_pid": st.sampled_from([0, 1, -1, os.getpid(), 2**31, 2**70]) | st.integers(),
        "anchor_start": _TEXTS, "created": _TEXTS, "owner": _TEXTS, "pid_file": _TEXTS,
        "job_id": st.integers(), "owns_job": st.booleans(),
        "step_id": st.none() | st.integers(), "exit_code": st.none() | st.integers()})),
    [(name,) for name in ContainerRecord.FIELDS])
STATE_BYTES = _mostly(
    RECORD_DOCUMENTS.map(lambda doc: json.dumps(doc).encode()),
    JSON_VALUES.map(lambda doc: json.dumps(doc).encode()) | st.binary(max_size=300))


def _check_record(record: ContainerRecord) -> None:
    """A record's fields have the types ContainerRecord.TYPES names (bool is not int)."""
    for name in ContainerRecord.FIELDS:
        value = getattr(record, name)
        kinds = ContainerRecord.TYPES[name]
        assert type(value) in kinds, (name, value)
    assert record.status in STATUSES


class TestStateJson:
    def test_any_state_json(self) -> None:
        """Any bytes or JSON document as <root>/<id>/state.json: a record of the right
        types and a one-line state document, or a ScrunError with a one-line message."""
        root = tempfile.mkdtemp(prefix="scrun-fuzz-root-")  # 0700, the caller's
        cdir = os.path.join(root, "c1")
        os.mkdir(cdir, 0o700)
        state = os.path.join(cdir, STATE_FILE)

        @FUZZ
        @given(data=STATE_BYTES)
        @example(data=b'{"id":"c1","bundle":"/b","rootfs":"/b/r","status":"running",'
                      b'"anchor_pid":1180591620717411303424}')
        @example(data=b'{"id":"c1","bundle":"/b","rootfs":"/b/r","status":"stopped",'
                      b'"anchor_pid":true}')
        @example(data=b'{"id":"c1","bundle":"/b","rootfs":"/b/r","status":"created",'
                      b'"annotations":{"a":[1,{"b":NaN}]}}')
        @example(data=b'{"id":"c1","bundle":"/b","rootfs":"/b/r","anchor_pid":1'
                      + b"0" * 5000 + b"}")
        def check(data: bytes) -> None:
            fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            with Container(root, "c1") as container:
                try:
                    record = container.record()
                except ScrunError as exc:
                    assert _one_line(str(exc)), str(exc)
                    record = None
                if record is not None:
                    _check_record(record)
                try:
                    line = container.state_line()
                except ScrunError as exc:
                    assert record is None, exc
                    assert _one_line(str(exc)), str(exc)
                else:
                    assert record is not None and _one_line(line), line
                    doc = json.loads(line)
                    assert record.id == doc["id"]
                    assert doc["status"] in STATUSES

        try:
            check()
        finally:
            shutil.rmtree(root, ignore_errors=True)


# ---- (d) the command line of every verb, in-process ------------------------------------------

FAKE_COMMANDS = ("salloc", "srun", "sbatch", "scancel", "scontrol", "squeue", "sinfo", "sacct",
                 "docker", "podman", "crun", "runc")
VERBS = ("create", "start", "state", "kill", "delete", "run", "features", "version", "doctor")
# not `spec`: it writes config.json wherever --bundle says, the watched directory too
OTHER_VERBS = ("pause", "list", "")
IDS = ("c1", "", ".", "..", "../watched", "../watched/evil", "a/b", "x" * 300, "-x",
       "c1\n", "\u00fc", "c+1.-_", "*", "c1 ", "--log")
SIGNALS = ("TERM", "9", "SIGKILL", "hup", "SIGRTMAX-1", "RTMIN+2", "0", "-1", "65", "TERMX",
           "1e3", "")
WATCHED = ("../watched/evil", "../watched", "../watched/keep")
#: values by the option's dest; paths are relative to the working directory (inside the
#: tmp dir), where a --log file may be written: only a misplaced option (below) names
#: the watched directory, which nothing may touch
OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "log_path": ("log.txt", "file:log2.txt", "syslog:x", "journald:x", "sub/none/x", "", "."),
    "log_format": ("text", "json", "xml", ""),
    "log_level": ("error", "warning", "debug", "info", "quiet", "debug5", "loud", ""),
    "rootless": ("true", "false", "auto", "1", "0", "maybe"),
    "bundle": ("../bad-bundle", ".", "", "nonexistent", "/nonexistent/bundle", "a\nb",
               "../watched"),
    "pid_file": ("pid", "sub/none/pid", "", "../watched/pid"),
    "console_socket": ("sock", "", "/nonexistent/sock"),
    "config": ("config.json", "other.json", ""),
    "preserve_fds": ("0", "1", "-1", "x", "99999999999999999999"),
}
_TEXTS_NO_SLASH = _TEXTS.filter(lambda t: "/" not in t)


def _weighted(common: tuple[str, ...], rare: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Mostly one of `common`, now and then one of `rare`."""
    return st.integers(min_value=0, max_value=5).flatmap(
        lambda n: rare if n == 5 else st.sampled_from(common))


def _option(table: dict[str, Any], names: list[str],
            rare: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """One option of `table` (cli/argv_table.py) as a command line has it: a flag, or
    a value as the next word or after `=`."""
    def spell(name: str) -> st.SearchStrategy[list[str]]:
        dest, kind = table[name][0], table[name][1]
        if kind in ("flag", "count"):
            return st.just([name])
        values = _weighted(OPTION_VALUES.get(dest, ("x",)), rare)
        if kind == "optional":  # --rootless: alone or with a value
            return st.just([name]) | values.map(lambda v: [name, v])
        return values.flatmap(lambda v: st.sampled_from(
            [[name, v], [f"{name}={v}"]] if name.startswith("--") else [[name, v]]))

    return st.sampled_from(sorted(names)).flatmap(spell)


def _global_options() -> st.SearchStrategy[list[str]]:
    """Global options before the verb: every one of the table but --root (the test's)
    and -f/--slurm-conf (the stand-in slurm.conf in the environment)."""
    from scrun_py.cli.argv_table import OPTIONS

    table = OPTIONS[""]
    names = [n for n in table if n not in ("--root", "-f", "--slurm-conf")]
    return st.lists(_option(table, names, _TEXTS_NO_SLASH), max_size=3).map(
        lambda opts: [w for o in opts for w in o])


#: a word the verb does not expect, or an option misplaced after the verb (a global
#: one, another verb's), with a value that may name the watched directory
JUNK = (st.sampled_from(("--bogus", "-x", "--", "-", "--help", "-h", "--usage", "--root", "--log",
                         "--force", "--regex", "--json", "--detach", "--keep", "-a"))
        .map(lambda w: [w])
        | st.tuples(st.sampled_from(("--log", "--root", "--bundle", "--pid-file", "-f")),
                    st.sampled_from(WATCHED) | _TEXTS).map(list)
        | _TEXTS.map(lambda w: [w]))


def _verb_words(verb: str) -> st.SearchStrategy[list[str]]:
    """What follows `verb`: its own options, its arguments (an id, for kill a signal),
    and sometimes a word it does not expect; in any order."""
    from scrun_py.cli.argv_table import ARGS, OPTIONS

    table = OPTIONS.get(verb, {})
    own = (st.lists(_option(table, list(table), _TEXTS), max_size=3) if table
           else st.just([]))
    wanted = ARGS.get(verb, ())
    args: st.SearchStrategy[list[list[str]]] = st.just([])
    if wanted:
        ids = _weighted(("c1",) * 4 + IDS, _TEXTS).map(lambda i: [[i]])
        args = ids if len(wanted) == 1 else st.tuples(
            ids, st.just([]) | _weighted(SIGNALS, _TEXTS).map(lambda s: [[s]])).map(
            lambda t: t[0] + t[1])
    junk: st.SearchStrategy[list[list[str]]] = st.just([]) | st.lists(JUNK, min_size=1,
                                                                      max_size=2)
    return st.tuples(own, args, junk).flatmap(
        lambda t: st.permutations(t[0] + t[1] + t[2])).map(
        lambda items: [w for item in items for w in item])


#: a command line as (global options, verb, what follows the verb); no word holds a NUL
#: byte, which execve cannot pass
COMMAND_LINES = st.tuples(
    _global_options(),
    _weighted(VERBS, st.sampled_from(OTHER_VERBS) | _TEXTS.filter(
        lambda t: not t.startswith("-")))).flatmap(
    lambda gv: _verb_words(gv[1]).map(lambda rest: (gv[0], gv[1], rest))).map(
    lambda line: tuple([w.replace("\x00", "") for w in part] if isinstance(part, list)
                       else part.replace("\x00", "") for part in line))


def _listing(path: Path) -> list[tuple[str, int, int]]:
    """Every name under `path`, with its size and mode: what a stray write would change."""
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        for name in sorted(dirnames + filenames):
            st_ = os.lstat(os.path.join(dirpath, name))
            out.append((os.path.relpath(os.path.join(dirpath, name), path), st_.st_size,
                        st_.st_mode))
    return sorted(out)


class _Sandbox:
    """A tmp dir: work/ (the working directory: relative paths land here), root/ (the
    --root, 0700, empty), watched/ (nothing may change it), bad-bundle/ (a config.json
    that does not parse), bin/ (failing stand-ins for Slurm and the engines, alone on
    PATH), and a slurm.conf path with nothing there."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.work = base / "work"
        self.root = base / "root"
        self.watched = base / "watched"
        self.bin = base / "bin"
        self.slurm_conf = base / "etc" / "slurm.conf"
        self.work.mkdir()
        self.root.mkdir(mode=0o700)
        self._watched()
        (base / "bad-bundle" / "rootfs").mkdir(parents=True)
        (base / "bad-bundle" / "config.json").write_text('{"ociVersion": ')
        self.bin.mkdir()
        for name in FAKE_COMMANDS:
            fake = self.bin / name
            fake.write_text("#!/bin/sh\necho \"$0: not a cluster\" >&2\nexit 1\n")
            fake.chmod(0o755)
        self.top = sorted(os.listdir(base))
        self.anchors: list[str] = []  # every attempt to start an anchor

    def _watched(self) -> None:
        self.watched.mkdir()
        (self.watched / "keep").write_text("keep\n")

    def reset(self) -> None:
        """Back to the state __init__ left, whatever a command did: every example (and
        Hypothesis' replay of a failing one) starts from the same tmp dir."""
        for name in set(os.listdir(self.base)) - set(self.top):
            path = self.base / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        for directory in (self.work, self.root):
            for entry in os.listdir(directory):
                path = directory / entry
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        shutil.rmtree(self.watched)
        self._watched()
        self.anchors.clear()


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """entry.main with `argv`, as the console script runs it (os._exit raises here)."""
    from scrun_py import entry

    out, err = io.StringIO(), io.StringIO()
    with (mock.patch.object(sys, "argv", ["scrun-py", *argv]), contextlib.redirect_stdout(out),
          contextlib.redirect_stderr(err)):
        try:
            entry.main()
        except SystemExit as exc:
            code = exc.code
        else:  # pragma: no cover - entry.main always exits
            raise AssertionError("entry.main returned")
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _Sandbox:
    """The sandbox, with the environment, the working directory, os._exit and the
    anchor launch replaced for the test."""
    from scrun_py.anchor import launch

    box = _Sandbox(tmp_path)
    for name in list(os.environ):
        if name.startswith(("SCRUN_", "SLURM_", "XDG_", "CONTAINERS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", str(box.bin))
    monkeypatch.setenv("SLURM_CONF", str(box.slurm_conf))
    monkeypatch.setenv("HOME", str(box.work))
    monkeypatch.chdir(box.work)

    def fake_exit(code: int) -> None:
        raise SystemExit(code)

    def no_fork(cls: object, conf: object) -> None:
        return None  # create then starts its anchor late: start_late below

    def no_late(*args: object, **kwargs: object) -> None:
        box.anchors.append("launch.start_late")
        raise OSError(1, "the fuzz test starts no anchor")

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(launch.EarlyAnchor, "fork", classmethod(no_fork))
    monkeypatch.setattr(launch, "start_late", no_late)
    return box


def _verbose(argv: list[str]) -> bool:
    """Whether the command line asks for more than errors on stderr (or for help, which
    click prints itself)."""
    return any(w in ("--debug", "-v", "--help", "-h", "--usage")
               or w.startswith(("--log-level", "--debug=")) for w in argv)


class TestCommandLine:
    def test_any_argv(self, sandbox: _Sandbox) -> None:
        """Any command line built from the verbs' options, ids and random words: an exit
        status, no traceback or internal error, one stderr line for a failure, nothing
        written outside the tmp dir's working directory, no container left in --root,
        and no anchor started."""
        watched = _listing(sandbox.watched)
        prefix = ["--root", str(sandbox.root)]

        @FUZZ
        @given(line=COMMAND_LINES)
        @example(line=([], "create", ["--bundle", "../bad-bundle", "c1"]))
        @example(line=([], "run", ["c1"]))
        @example(line=([], "create", ["-b", "/nonexistent/bundle", "--pid-file", "pid", "c1"]))
        @example(line=([], "create", ["--pid-file", "../watched/pid", "c1"]))
        @example(line=([], "state", ["../watched"]))
        @example(line=([], "delete", ["--force", "../watched"]))
        @example(line=([], "delete", ["--regex", "."]))
        @example(line=([], "kill", ["c1", "SIGRTMAX-1"]))
        @example(line=([], "doctor", ["--json"]))
        @example(line=(["--log", "log.txt", "--log-format", "json"], "state", ["c1"]))
        def check(line: tuple[list[str], str, list[str]]) -> None:
            argv = [*line[0], line[1], *line[2]]
            try:
                code, out, err = _cli([*prefix, *argv])
                event(f"exit status {code}")
                assert "Traceback" not in out + err, (argv, err)
                assert "internal error" not in err, (argv, err)
                lines = err.splitlines()
                if code:
                    assert lines and lines[-1].startswith("scrun-py: "), (argv, err)
                    if not _verbose(argv):
                        assert 1 == len(lines), (argv, err)
                elif not _verbose(argv):
                    assert "" == err, (argv, err)
                assert [] == sandbox.anchors, argv
                assert [] == os.listdir(sandbox.root), (argv, os.listdir(sandbox.root))
                assert watched == _listing(sandbox.watched), argv
                assert sandbox.top == sorted(os.listdir(sandbox.base)), argv
            finally:
                sandbox.reset()

        check()

    @pytest.mark.parametrize("rest", [
        ["c1", "--log", "../watched/evil"],  # click refuses --log here
        ["--", "--log", "../watched/evil"],  # the id `--log`, the signal ../watched/evil
    ])
    def test_a_log_word_after_the_verb_names_no_file(self, sandbox: _Sandbox,
                                                     rest: list[str]) -> None:
        """Only the global --log (before the verb) names the log file: a failing command
        writes nothing where a word after the verb points."""
        code, _out, err = _cli(["--root", str(sandbox.root), "kill", *rest])
        assert 0 != code and 1 == len(err.splitlines())
        assert ["keep"] == sorted(os.listdir(sandbox.watched))
