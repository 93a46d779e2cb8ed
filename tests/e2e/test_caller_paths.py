"""The paths a caller names, and the programs scrun-py runs, on a shared login node where
the kernel's own protection is off: scruntest2 (the attacker) plants, scruntest (the
victim) runs scrun-py on the real cluster.

Every test turns `fs.protected_symlinks` and `fs.protected_fifos` off for its run (and
puts them back): scrun-py's own rules (base/callerpath.py, procs.resolve_program, the
console socket's SO_PEERCRED check) must hold without them.  Each attack fails, the
victim's files are unchanged, every verb answers within ANSWER_S (a bound against a
hang, not a performance figure), and nothing is left: no anchor, no job, no record.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    SCRUN,
    SYSTEM_PATH,
    VENV,
    Bundle,
    Env,
    User,
    other_user,
    scontrol_job,
    squeue,
    traces,
    wait_anchor,
    wait_until,
)

pytestmark = pytest.mark.e2e

PYTHON = str(VENV / "bin" / "python")
#: every verb (and a refusing create) answers within this many seconds: a bound against a
#: hang, loose on purpose (the refusals take well under a second)
ANSWER_S = 5.0
#: a create that asks Slurm for a job: salloc's allocation is Slurm's time, not ours
ALLOC_S = 30.0
#: the subprocess timeout of every verb: a hang fails the test instead of stalling it
TIMEOUT_S = 10.0
SYSCTLS = (Path("/proc/sys/fs/protected_symlinks"), Path("/proc/sys/fs/protected_fifos"))
#: the programs scruntest2 plants in the image's SCRUN_WORKING_DIR
PLANTED = ("env", "timeout", "sh", "unshare", "flock", "srun", "salloc", "squeue", "scancel")


@pytest.fixture
def unprotected(cluster: Path) -> Iterator[None]:
    """fs.protected_symlinks=0 and fs.protected_fifos=0 for the test, the values it found
    put back afterwards (also when the test fails)."""
    saved = {path: path.read_text() for path in SYSCTLS}
    try:
        for path in SYSCTLS:
            path.write_text("0\n")
        assert ["0", "0"] == [p.read_text().strip() for p in SYSCTLS]
        yield
    finally:
        for path, value in saved.items():
            path.write_text(value)


@dataclass
class Ran:
    rc: int
    stdout: str
    stderr: str
    elapsed: float
    out: Path  # the stdout file, which an anchor create started goes on writing

    def output(self) -> str:
        """The stdout file now (a container's words, once it has run)."""
        return self.out.read_text()


def _run(user: User, argv: list[str], cwd: Path, *, env: dict[str, str] | None = None,
         timeout: float = TIMEOUT_S) -> Ran:
    """argv as `user`, timed; output through files of its own (an anchor that `create`
    starts keeps create's stdio open until the container stops)."""
    tag = uuid.uuid4().hex[:8]
    out, err = cwd / f".{user.name}-{tag}.out", cwd / f".{user.name}-{tag}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        started = time.monotonic()
        proc = subprocess.run(user.argv(argv), env=env or user.env(), cwd=cwd, stdout=fo,
                              stderr=fe, timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)
        elapsed = time.monotonic() - started
    return Ran(proc.returncode, out.read_text(), err.read_text(), elapsed, out)


def _ok(ran: Ran) -> Ran:
    assert 0 == ran.rc, (ran.stdout, ran.stderr)
    return ran


def _scrun(env: Env, *args: str, log: Path | None = None, path_env: dict[str, str] | None = None,
           timeout: float = TIMEOUT_S, prefix: tuple[str, ...] = ()) -> Ran:
    """scrun-py as the victim (env.user), with --log (`log`, else the test's own), behind
    `prefix` (a command that runs it, e.g. prlimit)."""
    argv = [*prefix, str(SCRUN), "--root", str(env.root), "--log", str(log or env.log),
            "--log-format", "json", *args]
    return _run(env.user, argv, env.work, env=path_env, timeout=timeout)


def _create(env: Env, cid: str, bundle: Bundle, pid_file: Path, *extra: str,
            log: Path | None = None, path_env: dict[str, str] | None = None,
            prefix: tuple[str, ...] = ()) -> Ran:
    """create as the victim; a container it made is remembered (leftovers, reaping)."""
    ran = _scrun(env, "create", "--bundle", str(bundle.path), "--pid-file", str(pid_file),
                 *extra, cid, log=log, path_env=path_env, timeout=ALLOC_S + TIMEOUT_S,
                 prefix=prefix)
    if ran.rc == 0:
        env.anchors.append(int(pid_file.read_text()))
    return ran


def _one_line(ran: Ran, log: Path | None = None) -> str:
    """The one stderr line of a failed verb (no traceback there or in `log`)."""
    assert 0 != ran.rc, (ran.stdout, ran.stderr)
    lines = ran.stderr.splitlines()
    assert 1 == len(lines), ran.stderr
    assert lines[0].startswith("scrun-py: "), ran.stderr
    assert "Traceback" not in ran.stderr
    if log is not None and log.is_file():
        assert "Traceback" not in log.read_text()
    return lines[0]


def _records(log: Path) -> list[dict[str, object]]:
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def _job_of(env: Env, cid: str) -> int:
    return int(json.loads((env.root / cid / "state.json").read_text())["job_id"])


def _job_over(job: int) -> bool:
    state = squeue("-j", str(job), "-t", "all", "-o", "%T").strip()
    return state in ("", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def _nothing_left(env: Env, cid: str = "", jobs: tuple[int, ...] = ()) -> None:
    """No record, no anchor, no job of this test (traces) and each of `jobs` over."""
    assert [] == traces(env, cid)
    for job in jobs:
        wait_until(lambda job=job: _job_over(job), f"job {job} to end", 60)  # type: ignore[misc]


def _tmp(kind: str) -> Path:
    """A fresh name in the real, shared, sticky /tmp."""
    return Path(f"/tmp/scrun-e2e-{kind}-{uuid.uuid4().hex[:8]}")


def _remove(*paths: Path) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                path.unlink()
            except FileNotFoundError:
                pass


# -- 1. programs planted in the image's SCRUN_WORKING_DIR -------------------------------------


def _plant_programs(attacker: User, evil: Path, marks: Path) -> None:
    """scruntest2's programs in `evil`: each appends `id -un` and its name to a file in
    `marks` (world-writable, so the victim's process could write it), then runs the real
    program so that the victim's commands would still work and only the markers tell."""
    for name in PLANTED:
        real = shutil.which(name, path=SYSTEM_PATH)
        prog = evil / name
        prog.write_text(f'#!/bin/sh\necho "$(/usr/bin/id -un) {name} $*" >> {marks}/{name}\n'
                        + (f'exec {real} "$@"\n' if real else "exit 1\n"))
        prog.chmod(0o755)
        os.chown(prog, attacker.uid, attacker.gid)


def _markers(marks: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in marks.iterdir()}


class TestPlantedPrograms:
    def test_programs_in_the_working_directory_never_run(self, user_env: Env,
                                                         unprotected: None) -> None:
        """The image's SCRUN_WORKING_DIR is a directory of scruntest2's holding env,
        timeout, sh, unshare, flock, srun, salloc, squeue and scancel; the victim's PATH
        starts with an empty entry.  Through a lifecycle that prints, a container
        stopped by `kill` and deleted with --force, and one whose anchor is SIGKILLed
        (the allocation's holder runs the abandon script), none of them runs."""
        env, attacker = user_env, other_user()
        evil, marks = _tmp("evil"), _tmp("marks")
        try:
            _ok(_run(attacker, ["mkdir", "-m", "755", str(evil)], env.work))
            _ok(_run(attacker, ["mkdir", "-m", "777", str(marks)], env.work))
            _plant_programs(attacker, evil, marks)
            path_env = env.user.env(PATH=":" + env.user.env()["PATH"])
            image_env = [f"SCRUN_WORKING_DIR={evil}"]

            def verb(*args: str) -> Ran:
                ran = _scrun(env, *args, path_env=path_env)
                assert ran.elapsed < ANSWER_S, (args, ran.elapsed)
                return _ok(ran)

            # a lifecycle that prints
            prints = env.bundle(["echo", "genuine"], env=image_env, name="prints")
            ran = _ok(_create(env, "p", prints, env.work / "p.pid", path_env=path_env))
            jobs = [_job_of(env, "p")]
            # the attack is real: salloc, its holder and srun start in the planted directory
            assert str(evil) == scontrol_job(jobs[0])["WorkDir"]
            verb("start", "p")
            assert 0 == wait_anchor(env.anchors[-1], 60)
            assert "genuine\n" == ran.output()
            verb("delete", "p")
            # kill (the signal step: env and srun), then delete --force
            sleeps = env.bundle(["sleep", "60"], env=image_env, name="sleeps")
            _ok(_create(env, "k", sleeps, env.work / "k.pid", path_env=path_env))
            jobs.append(_job_of(env, "k"))
            verb("start", "k")
            verb("kill", "k", "TERM")
            verb("delete", "--force", "k")
            # the anchor killed: the holder runs the abandon script (timeout, env, srun)
            _ok(_create(env, "a", sleeps, env.work / "a.pid", path_env=path_env))
            jobs.append(_job_of(env, "a"))
            verb("start", "a")
            abandon = env.root / "a" / "on-abandon.sh"  # written once the step runs
            wait_until(abandon.exists, "the abandon script", 30)
            anchor = env.anchors[-1]
            os.kill(anchor, signal.SIGKILL)
            wait_anchor(anchor, 30)
            wait_until(lambda: _job_over(jobs[-1]), "the abandoned job to end", 60)
            verb("delete", "a")
            ran_planted = _markers(marks)
            assert not ran_planted, f"planted programs ran: {ran_planted}"
            _nothing_left(env, "a", tuple(jobs))
        finally:
            _remove(evil, marks)


# -- 2. --log planted by another user ----------------------------------------------------------


class TestPlantedLog:
    @pytest.mark.parametrize("kind", ["symlink-to-bashrc", "fifo"])
    def test_log_planted_in_tmp(self, user_env: Env, unprotected: None, kind: str) -> None:
        """scruntest2 puts /tmp/scrun-scruntest-XYZ.log there first: a symlink to the
        victim's ~/.bashrc, or a FIFO.  create, with an image whose SLURM_ variable
        would be logged as a warning, refuses at once with one line naming the log file;
        .bashrc is unchanged, nothing is left.  The control: with the victim's own log
        the same create records the warning there."""
        env, attacker = user_env, other_user()
        bashrc = Path(env.user.home) / ".bashrc"
        made_bashrc = not bashrc.exists()
        if made_bashrc:
            bashrc.write_text("# scrun-py e2e: known content\n")
            os.chown(bashrc, env.user.uid, env.user.gid)
        before = bashrc.read_bytes()
        log = Path(f"/tmp/scrun-{env.user.name}-{uuid.uuid4().hex[:6]}.log")
        ran_id = _tmp("ran-id")
        variable = f"SLURM_$(id>{ran_id})"
        bundle = env.bundle(["true"], env=[f"{variable}=1"])
        try:
            plant = (["ln", "-s", str(bashrc), str(log)] if kind.startswith("symlink")
                     else ["mkfifo", "-m", "666", str(log)])
            _ok(_run(attacker, plant, env.work))
            ran = _create(env, "c", bundle, env.work / "c.pid", log=log)
            assert ran.elapsed < ANSWER_S, ran.elapsed
            line = _one_line(ran)
            assert f"open log file {log}: " in line and "refusing it" in line, line
            assert before == bashrc.read_bytes()
            assert log.is_symlink() if kind.startswith("symlink") else stat.S_ISFIFO(
                log.lstat().st_mode)
            _nothing_left(env, "c")
            # the control: the victim's own log gets the warning record
            ran = _ok(_create(env, "c", bundle, env.work / "c.pid"))
            warned = [r for r in _records(env.log) if r.get("variable") == variable]
            assert 1 == len(warned), _records(env.log)
            _ok(_scrun(env, "delete", "--force", "c"))
            _nothing_left(env, "c")
            assert not ran_id.exists()
            assert before == bashrc.read_bytes()
        finally:
            _remove(log, ran_id)
            if made_bashrc:
                bashrc.unlink()


# -- 3. --pid-file planted, or replaced before delete ------------------------------------------


class TestPlantedPidFile:
    @pytest.mark.parametrize("kind", ["fifo", "symlink-to-dev-zero"])
    def test_pid_file_planted_in_tmp(self, user_env: Env, unprotected: None, kind: str) -> None:
        """scruntest2 puts the victim's --pid-file in /tmp there first, a FIFO or a
        symlink to /dev/zero: create refuses at once (before it asks Slurm for a job)
        with one line naming the pid file; what was planted stays, nothing is left."""
        env, attacker = user_env, other_user()
        pid_file = _tmp("pid")
        try:
            plant = (["mkfifo", "-m", "666", str(pid_file)] if kind == "fifo"
                     else ["ln", "-s", "/dev/zero", str(pid_file)])
            _ok(_run(attacker, plant, env.work))
            ran = _create(env, "c", env.bundle(["true"]), pid_file)
            line = _one_line(ran, env.log)
            assert f"pid file {pid_file}" in line, line
            assert ran.elapsed < ANSWER_S, ran.elapsed
            if kind == "fifo":
                assert stat.S_ISFIFO(pid_file.lstat().st_mode)
            else:
                assert "/dev/zero" == os.readlink(pid_file)
            assert [] == list(pid_file.parent.glob(f".{pid_file.name}.*")), "a temporary left"
            _nothing_left(env, "c")
            asked = [r for r in _records(env.log) if r.get("msg") == "allocation started"]
            assert [] == asked, ("refused only after a job was asked for: "
                                 f"{[r['msg'] for r in _records(env.log)]}")
        finally:
            _remove(pid_file)

    @pytest.mark.parametrize("kind", ["fifo", "symlink-to-bashrc"])
    def test_pid_file_replaced_before_delete(self, user_env: Env, unprotected: None,
                                             kind: str) -> None:
        """In a world-writable directory without the sticky bit, the victim's pid file is
        written, then scruntest2 renames a FIFO (or a symlink to the victim's ~/.bashrc)
        over it: `delete` answers within ANSWER_S, leaves what was planted (never opens
        or follows it), and the container is gone."""
        env, attacker = user_env, other_user()
        shared = _tmp("open")
        shared.mkdir()
        os.chmod(shared, 0o777)
        pid_file = shared / "c.pid"
        bashrc = Path(env.user.home) / ".bashrc"
        before = bashrc.read_bytes() if bashrc.exists() else b""
        try:
            _ok(_create(env, "c", env.bundle(["sleep", "60"]), pid_file))
            job = _job_of(env, "c")
            assert str(env.anchors[-1]) == pid_file.read_text()
            make = (["mkfifo", "-m", "666", str(shared / ".x")] if kind == "fifo"
                    else ["ln", "-s", str(bashrc), str(shared / ".x")])
            _ok(_run(attacker, make, env.work))
            _ok(_run(attacker, ["mv", "-f", str(shared / ".x"), str(pid_file)], env.work))
            ran = _ok(_scrun(env, "delete", "c"))
            assert ran.elapsed < ANSWER_S, ran.elapsed
            assert attacker.uid == pid_file.lstat().st_uid
            if kind == "fifo":
                assert stat.S_ISFIFO(pid_file.lstat().st_mode)
            else:
                assert str(bashrc) == os.readlink(pid_file)
                assert before == (bashrc.read_bytes() if bashrc.exists() else b"")
            wait_anchor(env.anchors[-1], TIMEOUT_S)
            _nothing_left(env, "c", (job,))
        finally:
            _remove(shared)


# -- 4. --console-socket bound first by another user --------------------------------------------

LISTENER = """\
import json, os, socket, sys, time
path, record = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o777)
s.listen(8)
s.settimeout(60)
print("ready", flush=True)
conn, _ = s.accept()
conn.settimeout(10)
error = ""
try:
    msg, fds, _flags, _addr = socket.recv_fds(conn, 4096, 4)
except OSError as exc:  # nothing came (a timeout): received nothing
    msg, fds, error = b"", [], repr(exc)
with open(record, "a") as fh:
    fh.write(json.dumps({"msg": msg.decode(errors="replace"), "fds": len(fds),
                         "error": error, "uid": os.getuid()}) + "\\n")
conn.close()
deadline = time.monotonic() + 30
for fd in fds[:1]:  # the pty master: what the container writes, as it comes
    os.set_blocking(fd, True)
    while time.monotonic() < deadline:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        with open(record + ".out", "ab") as fh:
            fh.write(data)
"""


@dataclass
class Listener:
    proc: subprocess.Popen[str]
    record: Path

    def got(self) -> list[dict[str, object]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def output(self) -> str:
        out = Path(f"{self.record}.out")
        return out.read_text(errors="replace") if out.exists() else ""

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _listen(user: User, path: Path, record: Path, script: Path) -> Listener:
    """LISTENER as `user` on `path` (it prints `ready` once it listens)."""
    proc = subprocess.Popen(user.argv([PYTHON, str(script), str(path), str(record)]),
                            env=user.env(), stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    with proc.stdout:
        assert "ready" == proc.stdout.readline().strip()
    return Listener(proc, record)


class TestConsoleSocket:
    def test_socket_bound_first_by_another_user(self, user_env: Env,
                                                unprotected: None) -> None:
        """scruntest2 binds the victim's --console-socket path in /tmp first: create of a
        process.terminal container fails with one line naming scruntest2's uid, the
        listener received no descriptor (and no data), nothing is left.  The control:
        the victim's own listener receives the pty master and reads what the container
        prints."""
        env, attacker = user_env, other_user()
        script = env.work / "listener.py"
        script.write_text(LISTENER)
        script.chmod(0o644)
        sock, record = _tmp("console"), _tmp("console-got")
        bundle = env.bundle(["echo", "tty-genuine"], terminal=True)
        listener = _listen(attacker, sock, record, script)
        try:
            ran = _create(env, "c", bundle, env.work / "c.pid", "--console-socket", str(sock))
            line = _one_line(ran, env.log)
            assert f"listener runs as uid {attacker.uid}" in line, line
            assert ran.elapsed < ALLOC_S, ran.elapsed
            time.sleep(0.5)
            assert all(0 == r["fds"] and "" == r["msg"] for r in listener.got()), \
                listener.got()
            _nothing_left(env, "c")
        finally:
            listener.stop()
            _remove(sock, record)
        # the control: the victim's own listener gets the master and the container's words
        own = env.work / "console.sock"
        listener = _listen(env.user, own, env.work / "got.json", script)
        try:
            _ok(_create(env, "c", bundle, env.work / "c.pid", "--console-socket", str(own)))
            job = _job_of(env, "c")
            wait_until(listener.got, "the victim's listener to receive", 10)
            got = listener.got()
            assert 1 == got[0]["fds"] and str(got[0]["msg"]).startswith("/dev/pts/"), got
            ran = _ok(_scrun(env, "start", "c"))
            assert ran.elapsed < ANSWER_S, ran.elapsed
            wait_until(lambda: "tty-genuine" in listener.output(), "the container's output", 30)
            assert 0 == wait_anchor(env.anchors[-1], 60)
            _ok(_scrun(env, "delete", "c"))
            _nothing_left(env, "c", (job,))
        finally:
            listener.stop()


# -- 5. a flood of idle connections to the anchor ------------------------------------------------

FLOOD = """\
import os, resource, socket, sys, time
path, count, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = count + 64 if hard == resource.RLIM_INFINITY else min(count + 64, hard)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
held, refused = [], 0
progress = time.monotonic()
# a connect the listener's full queue refuses is tried again, until 2 s pass without one
# that works (an anchor that no longer accepts)
while len(held) < count and time.monotonic() - progress < 2:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
    except BlockingIOError:
        s.close()
        refused += 1
        time.sleep(0.002)
        continue
    held.append(s)
    progress = time.monotonic()
print(f"ready {len(held)} {refused}", flush=True)
time.sleep(hold)
"""


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return os.path.exists(f"/proc/{pid}")
    return not done


def _end_anchor(env: Env, cid: str) -> None:
    """After a failed test: an anchor that still runs once the flood is gone is deleted
    (--force), else sent TERM (it withdraws its job), so that no job outlives the test."""
    anchor = env.anchors[-1] if env.anchors else 0
    if not anchor or not _alive(anchor):
        return
    try:
        _scrun(env, "delete", "--force", cid, timeout=30)
    except subprocess.TimeoutExpired:
        pass
    if _alive(anchor):
        os.kill(anchor, signal.SIGTERM)
        try:
            wait_anchor(anchor, 30)
        except TimeoutError:
            os.kill(anchor, signal.SIGKILL)


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no open-files limit for {pid}")


class TestConnectionFlood:
    COUNT = 1200
    NOFILE = 1024

    def test_idle_connections_do_not_silence_the_anchor(self, user_env: Env,
                                                        unprotected: None) -> None:
        """~1,200 idle connections of the victim's own uid to a created container's
        anchor socket, held open: state, start, kill and delete --force still answer,
        each within ANSWER_S, and delete --force leaves no anchor and no job."""
        env = user_env
        script = env.work / "flood.py"
        script.write_text(FLOOD)
        script.chmod(0o644)
        # pid 1 of the container's namespace: TERM (no handler) does not end it.  The
        # anchor gets the common default of a login node, 1024 descriptors (soft): the
        # flood is more connections than that
        _ok(_create(env, "f", env.bundle(["sleep", "120"]), env.work / "f.pid",
                    prefix=("prlimit", f"--nofile={self.NOFILE}:", "--")))
        assert self.NOFILE == _soft_nofile(env.anchors[-1])
        job = _job_of(env, "f")
        sock = env.root / "f" / "anchor.sock"
        flood = subprocess.Popen(
            env.user.argv([PYTHON, str(script), str(sock), str(self.COUNT), "60"]),
            env=env.user.env(), stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        try:
            assert flood.stdout is not None
            with flood.stdout:
                words = flood.stdout.readline().split()
            assert "ready" == words[0], words
            # more connections than the anchor has descriptors (those it could not
            # accept wait in its listen queue, or were refused when that was full)
            held = int(words[1])
            assert held > self.NOFILE, f"the flood connected {held} times only"
            timings: dict[str, float] = {"connected": held}
            for name, args in (("state", ("state", "f")), ("start", ("start", "f")),
                               ("state running", ("state", "f")),
                               ("kill", ("kill", "f", "TERM")),
                               ("delete --force", ("delete", "--force", "f"))):
                try:
                    ran = _scrun(env, *args)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"{name} hung (no answer in {TIMEOUT_S} s) under the flood; "
                                f"answered so far: {timings}")
                timings[name] = round(ran.elapsed, 2)
                assert 0 == ran.rc, (name, ran.stderr, timings)
                if name == "state":
                    assert "created" == json.loads(ran.stdout)["status"]
                if name == "state running":
                    assert "running" == json.loads(ran.stdout)["status"]
                assert ran.elapsed < ANSWER_S, (name, timings)
            wait_anchor(env.anchors[-1], TIMEOUT_S)
            _nothing_left(env, "f", (job,))
        finally:
            flood.kill()
            flood.wait()
            _end_anchor(env, "f")


# -- 6. a NUL byte in an imported SCRUN_ value ----------------------------------------------------


class TestNulInImportedValue:
    def test_nul_in_scrun_working_dir(self, user_env: Env, unprotected: None) -> None:
        """config.json's process.env has SCRUN_WORKING_DIR=/tmp<NUL>x: create fails with
        one line (no traceback on stderr or in --log), exit non-zero, at once, and
        nothing is left."""
        env = user_env
        bundle = env.bundle(["true"], env=["SCRUN_WORKING_DIR=/tmp\0x"])
        assert "SCRUN_WORKING_DIR=/tmp\0x" in bundle.config()["process"]["env"]  # type: ignore[index]
        ran = _create(env, "n", bundle, env.work / "n.pid")
        line = _one_line(ran, env.log)
        assert "SCRUN_WORKING_DIR" in line and "NUL" in line, line
        assert ran.elapsed < ANSWER_S, ran.elapsed
        errors = [r for r in _records(env.log) if r.get("level") == "error"]
        assert 1 == len(errors), _records(env.log)
        _nothing_left(env, "n")
