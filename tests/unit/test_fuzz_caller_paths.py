"""Property-based fuzzing (Hypothesis) of the paths a caller names: --log, --pid-file
and --console-socket each missing, a regular file, the caller's symlink to a file,
another user's symlink to a file (lchown: the unit tests run as root), a FIFO, a
directory, a listening unix socket, /dev/zero, another user's dangling symlink, or not
given, for `create` (and `delete --force` after it) through the real console-script
entry, with the fake Slurm backend (tests/unit/fake_slurm.py) in the anchor create forks.

Each create runs as its own process (an anchor outlives it) under a timeout: no hang,
no traceback (stderr, --log), exit 0 or one error line, the outcome base/callerpath's
rules say, nothing left in --root or running on failure, and nothing planted, nor what
a planted symlink points to, changed.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit.test_launch import _processes_naming

REPO = Path(__file__).resolve().parents[2]
OTHER_UID = 4242  # another local user, played by lchown
ROOT = os.geteuid() == 0
#: the kinds of path; another user's symlinks need root (lchown) and are left out without it
KINDS = ("missing", "regular", "own-symlink", "fifo", "directory", "socket", "dev-zero",
         *(("foreign-symlink", "dangling-symlink") if ROOT else ()))
#: what a --log or a --pid-file of each kind does (base/callerpath): refused at once, or used
LOG_REFUSED = {"fifo", "directory", "socket", "dev-zero", "foreign-symlink",
               "dangling-symlink"}
#: a symlink is replaced (rename), never followed; another user's is refused at create
#: only in a sticky directory it does not own (the fuzz's directory is not sticky)
PID_REFUSED = {"fifo", "directory", "socket", "dev-zero"}
TARGET = b"precious: the victim's file\n"
TIMEOUT_S = 20.0
FUZZ = settings(derandomize=True, max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
#: the console-script entry with the fake Slurm backend: the anchor create forks is this
#: same interpreter, so CliSlurm is FakeSlurm there too
WRAPPER = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
           "from scrun_py.slurm import cli_backend; "
           "from tests.unit.fake_slurm import FakeSlurm; "
           "_fake = FakeSlurm(); cli_backend.CliSlurm = lambda **_kw: _fake; "
           "from scrun_py.entry import main; main()")
#: Slurm's commands as failing stand-ins that say they ran (no real Slurm is reached)
STAND_INS = ("salloc", "srun", "scancel", "squeue", "scontrol", "sinfo", "sbatch")

Kind = str | None  # None: the option is not given


@dataclass
class Box:
    """One example's world: a bundle, a --root, the place things are planted, and the
    victim's file the planted symlinks point to."""

    base: Path
    sockets: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("plant", "victim", "bin", "bundle/rootfs/bin"):
            (self.base / name).mkdir(parents=True)
        (self.base / "bundle/rootfs/bin/true").touch(mode=0o755)  # create looks it up
        self.root.mkdir(mode=0o700)
        self.target.write_bytes(TARGET)
        (self.base / "slurm.conf").write_text("")
        (self.base / "oci.conf").write_text('RunTimeRun="r %b" RunTimeKill="k" '
                                            'RunTimeDelete="d"\n')
        for name in STAND_INS:
            prog = self.base / "bin" / name
            prog.write_text(f"#!/bin/sh\necho {name} >> {self.base}/slurm-ran\nexit 1\n")
            prog.chmod(0o755)

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def target(self) -> Path:
        return self.base / "victim" / "file"

    @property
    def nowhere(self) -> Path:
        return self.base / "victim" / "nowhere"

    def bundle(self, terminal: bool) -> Path:
        config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                  "process": {"args": ["true"], "env": ["PATH=/bin"], "cwd": "/",
                              "terminal": terminal}}
        (self.base / "bundle" / "config.json").write_text(json.dumps(config))
        return self.base / "bundle"

    def plant(self, kind: Kind, name: str) -> str | None:
        """`kind` at plant/`name`; the path to name on the command line."""
        if kind is None:
            return None
        if kind == "dev-zero":
            return "/dev/zero"
        path = self.base / "plant" / name
        if kind == "regular":
            path.write_bytes(b"planted\n")
        elif kind in ("own-symlink", "foreign-symlink"):
            path.symlink_to(self.target)
        elif kind == "dangling-symlink":
            path.symlink_to(self.nowhere)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "socket":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sockets.append(sock)
            sock.bind(str(path))
            sock.listen(4)
        if kind in ("foreign-symlink", "dangling-symlink"):
            os.lchown(path, OTHER_UID, OTHER_UID)
        return str(path)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def _scrun(box: Box, argv: list[str]) -> tuple[int, str, str]:
    """The console script's entry with the fake backend, as its own process; output
    through files (an anchor keeps create's stdio open until it stops)."""
    import subprocess

    env = {"PATH": f"{box.base / 'bin'}:/usr/bin:/bin", "SLURM_CONF": str(box.base / "slurm.conf"),
           "SCRUN_PY_SLURM_BACKEND": "cli", "HOME": str(box.base), "LANG": "C.UTF-8"}
    out, err = box.base / "out", box.base / "err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        try:
            proc = subprocess.run([sys.executable, "-P", "-c", WRAPPER, str(REPO), *argv],
                                  env=env, cwd=box.base, stdout=fo, stderr=fe,
                                  stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hung: {argv}")
    return proc.returncode, out.read_text(), err.read_text()


def _refusal(log: Kind, pid: Kind, console: Kind, terminal: bool) -> str:
    """What create must refuse first ("" if nothing): --log is opened before anything,
    the pid file is checked before the anchor starts, the terminal is sent once the job
    is allocated (only with process.terminal, and only to a listening socket)."""
    if log in LOG_REFUSED:
        return "log file"
    if pid in PID_REFUSED:
        return "pid file"
    if terminal and console is None:
        return "no --console-socket"
    if terminal and console != "socket":
        return "--console-socket"
    return ""


def _log_text(log: str | None) -> str:
    """The --log file's text, when it is a file one may read without blocking."""
    if log is None or not os.path.isfile(log):
        return ""
    return Path(log).read_text(errors="replace")


def _gone(root: Path) -> bool:
    return not _processes_naming(str(root))


def _wait_gone(root: Path) -> None:
    deadline = time.monotonic() + 10
    while not _gone(root):
        assert time.monotonic() < deadline, f"an anchor of {root} is still running"
        time.sleep(0.05)


def _end_anchors(root: Path) -> None:
    """After an example, whatever happened: SIGKILL each process still naming its
    --root (an anchor a failed example left; the example has already failed then)."""
    import signal

    for pid in _processes_naming(str(root)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _terminal_received(box: Box) -> None:
    """The listening socket (the caller's own) got the pty master."""
    listener = box.sockets[-1]
    listener.settimeout(5)
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(5)
        msg, fds, _flags, _addr = socket.recv_fds(conn, 1024, 2)
    for fd in fds:
        os.close(fd)
    assert msg.startswith(b"/dev/pts/") and 1 == len(fds), (msg, fds)


def _check_planted(kinds: dict[str, Kind], paths: dict[str, str | None], box: Box) -> None:
    """What was planted is what it was (a used --log or pid file aside), and what the
    symlinks point to is unchanged: appended to only through the caller's own link."""
    for option, kind in kinds.items():
        path = paths[option]
        if kind == "fifo":
            assert stat.S_ISFIFO(os.lstat(str(path)).st_mode), option
        elif kind == "directory":
            assert [] == os.listdir(str(path)), option
        elif kind == "socket":
            assert stat.S_ISSOCK(os.lstat(str(path)).st_mode), option
    text = box.target.read_bytes()
    if kinds["log"] == "own-symlink":
        assert text.startswith(TARGET)
    else:
        assert TARGET == text
    assert not os.path.lexists(box.nowhere), "created through another user's dangling link"


def _one_example(box: Box, log_kind: Kind, pid_kind: Kind, console_kind: Kind,
                 terminal: bool) -> None:
    kinds = {"log": log_kind, "pid": pid_kind, "console": console_kind}
    paths = {"log": box.plant(log_kind, "log"), "pid": box.plant(pid_kind, "pid"),
             "console": box.plant(console_kind, "console")}
    argv = ["--root", str(box.root)]
    if paths["log"] is not None:
        argv += ["--log", paths["log"], "--log-format", "json"]
    create = [*argv, "create", "--bundle", str(box.bundle(terminal))]
    if paths["pid"] is not None:
        create += ["--pid-file", paths["pid"]]
    if paths["console"] is not None:
        create += ["--console-socket", paths["console"]]
    code, out, err = _scrun(box, [*create, "c1"])
    assert "Traceback" not in out + err + _log_text(paths["log"]), err
    refused = _refusal(log_kind, pid_kind, console_kind, terminal)
    if code:
        lines = err.splitlines()
        assert 1 == len(lines) and lines[0].startswith("scrun-py: "), err
        assert refused and refused in lines[0], (kinds, terminal, err)
        _wait_gone(box.root)
        assert [] == os.listdir(box.root), (kinds, terminal)
        if pid_kind not in (None, "dev-zero") and pid_kind not in PID_REFUSED:
            assert os.path.lexists(str(paths["pid"])) == (pid_kind != "missing")
    else:
        assert "" == refused, (kinds, terminal, err)
        if paths["pid"] is not None:
            pid = int(Path(paths["pid"]).read_text())
            # the pid file names the container's pid (the namespace holder, a shell
            # that keeps create's command line), one of the two processes of this
            # --root (the anchor is the other)
            assert pid in _processes_naming(str(box.root))
        if terminal:
            _terminal_received(box)
        code, out, err = _scrun(box, [*argv, "delete", "--force", "c1"])
        assert (0, "") == (code, err), err
        _wait_gone(box.root)
        assert [] == os.listdir(box.root)
        if paths["pid"] is not None:
            assert not os.path.lexists(paths["pid"]), "the pid file was left"
    assert "Traceback" not in _log_text(paths["log"])
    assert not (box.base / "slurm-ran").exists(), "a real Slurm command was run"
    _check_planted(kinds, paths, box)


KIND = st.sampled_from((None, *KINDS))
#: the attacks themselves, beside the fuzzing: every example runs these first
EXAMPLES = [
    ("fifo", None, None, False), (None, "fifo", None, False),
    ("regular", "own-symlink", "socket", True), ("missing", "missing", "directory", True),
    ("own-symlink", "regular", "fifo", False), ("dev-zero", "dev-zero", "dev-zero", True),
    *([("foreign-symlink", None, None, False), ("dangling-symlink", None, None, False),
       (None, "foreign-symlink", "foreign-symlink", True),
       ("missing", "dangling-symlink", "socket", True)] if ROOT else []),
]


class TestCallerPaths:
    def test_any_kind_of_path(self, tmp_path: Path) -> None:
        """Every option of create that names a path, each of any kind, together, with or
        without process.terminal."""
        counter = iter(range(1 << 30))

        def check(log_kind: Kind, pid_kind: Kind, console_kind: Kind, terminal: bool) -> None:
            box = Box(tmp_path / f"e{next(counter)}")
            try:
                _one_example(box, log_kind, pid_kind, console_kind, terminal)
            finally:
                box.close()
                _end_anchors(box.root)
                shutil.rmtree(box.base, ignore_errors=True)

        test = given(log_kind=KIND, pid_kind=KIND, console_kind=KIND,
                     terminal=st.booleans())(check)
        for log_kind, pid_kind, console_kind, terminal in EXAMPLES:
            test = example(log_kind=log_kind, pid_kind=pid_kind, console_kind=console_kind,
                           terminal=terminal)(test)
        FUZZ(test)()
