"""Fixtures for end-to-end tests against the real local cluster (scripts/cluster.sh up).

Tests run scrun-py exactly as an engine does: as a separate process, with the
caller's stdio as files/pipes, as root and as the ordinary test user.  The test
process is a child subreaper, so each anchor is reparented to it after `create`
exits and its exit status (the container's) can be collected with waitpid.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scrun_py.slurm import release_memo

STATE = Path(os.environ.get("SCRUN_TEST_STATE", "/var/lib/scrun-py-test"))
# the controller's slurm.conf; on the site cluster (SCRUN_TEST_SITE=1, scripts/cluster.sh
# up --nodes N on 23.11+) the login node has none: its clients are configless (sackd)
SLURM_CONF = STATE / "slurm.conf"
SITE = os.environ.get("SCRUN_TEST_SITE") == "1"
SCRATCH = Path(os.environ.get("SCRUN_TEST_SCRATCH", "/shared/scratch"))
TEST_USER = os.environ.get("SCRUN_TEST_USER", "scruntest")
VENV = Path(os.environ.get("SCRUN_TEST_VENV", "/opt/scrun-py/venv"))
SCRUN = VENV / "bin" / "scrun-py"
# the tests' bundles and work dirs: on the site cluster, where the nodes see them (the
# scratch the login node and the nodes share; the login node's /tmp is its own)
BASE = SCRATCH / "scrun-py-e2e" if SITE else Path("/tmp/scrun-py-e2e")
# the two settings of lua/scrun-staging.lua as the engines' scrun.lua has them: as shipped
# on a one-node cluster, on the shared scratch on the site cluster (scripts/cluster.sh)
STAGING_BASE = f"{SCRATCH}/%u/scrun-staging" if SITE else "/tmp/scrun-staging-%u"
CACHE_BASE = f"{SCRATCH}/%u/scrun-cache" if SITE else "/tmp/scrun-cache-%u"
# the directory of slurm.conf, oci.conf and scrun.lua the engines are configured with
# (docs' /etc/slurm/): scripts/engines.sh's copies, or sackd's on the site cluster
ENGINE_CONF = Path(os.environ.get("SCRUN_TEST_ENGINE_CONF", "") or STATE / "engines" / "conf")
# the Slurm release under test (scripts/cluster.sh env --slurm R): the machine's packaged
# Slurm has no prefix; a built release lives in /opt/slurm/R
SLURM_RELEASE = os.environ.get("SCRUN_TEST_SLURM", "")
SLURM_PREFIX = os.environ.get("SCRUN_TEST_SLURM_PREFIX", "")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
SLURM_PATH = (f"{SLURM_PREFIX}/bin:{SLURM_PREFIX}/sbin:{SYSTEM_PATH}" if SLURM_PREFIX
              else SYSTEM_PATH)
REPO_ROOT = Path(__file__).resolve().parents[2]
BUSYBOX_APPLETS = ("sh", "echo", "cat", "true", "false", "sleep", "env", "id",
                   "hostname", "ls", "test", "touch", "kill", "wc", "head")
PR_SET_CHILD_SUBREAPER = 36


def _cluster_problem() -> str | None:
    if os.geteuid() != 0:
        return "end-to-end tests run as root (they switch to the test user themselves)"
    if not SLURM_CONF.exists():
        return f"no local cluster ({SLURM_CONF} missing): run scripts/cluster.sh up"
    if not SCRUN.exists():
        return f"{SCRUN} missing: run scripts/cluster.sh up"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=slurm_env(), capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if out.returncode != 0 or not out.stdout.strip():
        return f"slurmctld not answering: {out.stderr.strip()}"
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        return f"test user {TEST_USER} missing: run scripts/cluster.sh up"
    return None


def slurm_env(**extra: str) -> dict[str, str]:
    env = {"PATH": SLURM_PATH, "LANG": "C.UTF-8"}
    if not SITE:
        env["SLURM_CONF"] = str(SLURM_CONF)
    # the Slurm backend the suite runs on (scripts/test.sh: pyslurm where it is installed)
    backend = os.environ.get("SCRUN_PY_SLURM_BACKEND")
    if backend:
        env["SCRUN_PY_SLURM_BACKEND"] = backend
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def cluster() -> Path:
    problem = _cluster_problem()
    if problem:
        # under CI=true this skip fails: it is not on the allow-list (tests/conftest.py)
        pytest.skip(problem)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    BASE.mkdir(mode=0o755, exist_ok=True)
    os.chmod(BASE, 0o1777)
    return SLURM_CONF


def slurm_release() -> tuple[int, int]:
    """(major, minor) of the Slurm release under test."""
    out = subprocess.run(["sinfo", "-V"], env=slurm_env(), capture_output=True, text=True,
                         timeout=30).stdout.split()
    major, minor = out[-1].split(".")[:2]
    return int(major), int(minor)


def squeue(*args: str) -> str:
    return subprocess.run(["squeue", "-h", *args], env=slurm_env(), capture_output=True,
                          text=True, timeout=30).stdout


def scontrol_job(job_id: int) -> dict[str, str]:
    """The job's fields; a job still COMPLETING (ended, Slurm cleaning up the node: seconds
    on a loaded machine) is asked again for up to 60 s, until its final state shows."""
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=slurm_env(),
                             capture_output=True, text=True, timeout=30).stdout
        fields: dict[str, str] = {}
        for word in out.split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key] = value
        if fields.get("JobState") != "COMPLETING" or time.monotonic() > deadline:
            return fields
        time.sleep(0.5)


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> User:
        pw = pwd.getpwnam(name)
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir)

    def env(self, **extra: str) -> dict[str, str]:
        env = slurm_env(HOME=self.home, USER=self.name, LOGNAME=self.name)
        env["PATH"] = f"{VENV}/bin:{env['PATH']}"
        if self.uid != 0:
            env["XDG_RUNTIME_DIR"] = f"/run/user/{self.uid}"
        env.update(extra)
        return env

    def argv(self, argv: list[str]) -> list[str]:
        if self.uid == 0:
            return argv
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups",
                "--", *argv]


@dataclass
class Bundle:
    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    def config(self) -> dict[str, object]:
        return json.loads(self.config_file.read_text())  # type: ignore[no-any-return]


def make_rootfs(path: Path) -> None:
    for d in ("bin", "usr/bin", "proc", "sys", "dev", "tmp", "etc"):
        (path / d).mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/busybox", path / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        for d in ("bin", "usr/bin"):
            link = path / d / applet
            if not link.exists():
                link.symlink_to("/bin/busybox")
    (path / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")


@dataclass
class Env:
    """One test's world: a user, a work dir, a --root, and everything it launched."""

    user: User
    work: Path
    root: Path
    log: Path
    anchors: list[int] = field(default_factory=list)

    def bundle(self, args: list[str], *, env: list[str] | None = None, name: str = "bundle",
               pid_ns: bool = True, terminal: bool = False,
               annotations: dict[str, str] | None = None) -> Bundle:
        bdir = self.work / name
        bdir.mkdir()
        make_rootfs(bdir / "rootfs")
        subprocess.run(["crun", "spec", "--rootless"], cwd=bdir, check=True, timeout=30)
        cfg = json.loads((bdir / "config.json").read_text())
        cfg["process"]["args"] = args
        cfg["process"]["terminal"] = terminal
        cfg["process"]["env"] = ["PATH=/usr/bin:/bin", "TERM=xterm", *(env or [])]
        if not pid_ns:
            cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"]
                                          if n["type"] != "pid"]
            # a rootless runtime may not mount a new proc without its own pid namespace
            cfg["mounts"] = [m for m in cfg["mounts"] if m.get("type") != "proc"]
        if annotations:
            cfg["annotations"] = annotations
        (bdir / "config.json").write_text(json.dumps(cfg, indent=2))
        self.chown(bdir)
        return Bundle(bdir)

    def chown(self, path: Path) -> None:
        subprocess.run(["chown", "-R", f"{self.user.uid}:{self.user.gid}", str(path)],
                       check=True)

    def cmd(self, *args: str, conf: Path | None = None, log: bool = True) -> list[str]:
        argv = [str(SCRUN), "--root", str(self.root)]
        if log:
            argv += ["--log", str(self.log), "--log-format", "json"]
        if conf is not None:
            argv += ["-f", str(conf)]
        return self.user.argv([*argv, *args])

    def run(self, *args: str, conf: Path | None = None, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.cmd(*args, conf=conf), env=env or self.user.env(),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def create(self, cid: str, bundle: Bundle, *, stdin: int | None = None,
               env: dict[str, str] | None = None, conf: Path | None = None,
               extra: tuple[str, ...] = (), timeout: float = 120) -> Created:
        out = self.work / f"{cid}.out"
        err = self.work / f"{cid}.err"
        pid_file = self.work / f"{cid}.pid"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(
                self.cmd("create", "--bundle", str(bundle.path), "--pid-file", str(pid_file),
                         *extra, cid, conf=conf),
                env=env or self.user.env(), stdin=stdin if stdin is not None
                else subprocess.DEVNULL, stdout=fo, stderr=fe)
            rc = proc.wait(timeout=timeout)
        created = Created(self, cid, rc, out, err, pid_file)
        if rc == 0:
            created.anchor_pid = int(pid_file.read_text())
            self.anchors.append(created.anchor_pid)
        return created

    def state(self, cid: str) -> dict[str, object]:
        res = self.run("state", cid)
        assert res.returncode == 0, res.stderr
        assert res.stderr == ""
        doc: dict[str, object] = json.loads(res.stdout)
        return doc

    def log_records(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def errors(self) -> list[dict[str, object]]:
        return [r for r in self.log_records() if r.get("level") == "error"]


@dataclass
class Created:
    env: Env
    cid: str
    rc: int
    out: Path
    err: Path
    pid_file: Path
    anchor_pid: int = 0

    @property
    def pid(self) -> int:
        """The pid `create` wrote (the anchor removes the file when it stops)."""
        return self.anchor_pid

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def wait_exit(self, timeout: float = 120) -> int:
        """The anchor's exit status (it is our child: we are a subreaper)."""
        return wait_anchor(self.pid, timeout)

    def job_id(self) -> int:
        return job_id_of(self.env, self.cid)


OTHER_USER = os.environ.get("SCRUN_TEST_USER2", "scruntest2")


def other_user() -> User:
    """The second ordinary user scripts/cluster.sh up makes (the attacker of the shared-host
    tests)."""
    try:
        return User.named(OTHER_USER)
    except KeyError:
        pytest.fail(f"second test user {OTHER_USER} missing: run scripts/cluster.sh up")


def wait_until(pred: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Poll `pred` until it is true (a failed assertion naming `what` after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def wait_status(env: Env, cid: str, status: str, timeout: float = 60) -> dict[str, object]:
    """`state` of `cid` once it says `status` (a failed assertion after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while True:
        doc = env.state(cid)
        if doc["status"] == status:
            return doc
        assert time.monotonic() < deadline, f"status stayed {doc['status']}, wanted {status}"
        time.sleep(0.05)


def wait_anchor(pid: int, timeout: float = 120) -> int:
    """An anchor's exit status: the test process is a subreaper, so every anchor ends as
    its child.  TimeoutError if it is still running after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            raise TimeoutError(f"anchor {pid} still running after {timeout}s")
        time.sleep(0.02)


def job_id_of(env: Env, cid: str) -> int:
    record = json.loads((env.root / cid / "state.json").read_text())
    return int(record["job_id"])


def leftovers(env: Env, cid: str, job_ids: list[int] | None = None) -> list[str]:
    """Everything a container may leave behind; must be empty after delete."""
    found: list[str] = []
    if (env.root / cid).exists():
        found.append(f"spool dir {env.root / cid}")
    if (env.work / f"{cid}.pid").exists():
        found.append("pid file")
    for pid in env.anchors:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(") ")[1][0] not in "ZX":
                    found.append(f"anchor process {pid}")
        except OSError:
            pass
    found += _orphan_processes(env, cid)
    for job in job_ids or []:
        state = squeue("-j", str(job), "-o", "%T").strip()
        # COMPLETING: the job was ended and Slurm is still cleaning up the node (seconds
        # on a loaded machine); anything else that lasts is a job left running
        deadline = time.monotonic() + 60
        while state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.5)
            state = squeue("-j", str(job), "-o", "%T").strip()
        if state and state not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            found.append(f"job {job} {state}")
    return found


def _live_processes(proc_file: str, match: Callable[[bytes], bool]) -> list[tuple[int, str]]:
    """(pid, comm) of every live (not zombie) process whose /proc/PID/<proc_file> matches."""
    found: list[tuple[int, str]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{proc_file}", "rb") as fh:
                if not match(fh.read()):
                    continue
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        comm, _, rest = stat.partition("(")[2].rpartition(") ")
        if rest[:1] not in "ZX":
            found.append((int(entry), comm))
    return found


def _orphan_processes(env: Env, cid: str, wait_s: float = 10) -> list[str]:
    """salloc, its holder, srun: any process still carrying this container's abandon
    script path in its environment (each Slurm process the anchor starts has it)."""
    needle = f"SCRUN_PY_ON_ABANDON={env.root / cid}/".encode()
    deadline = time.monotonic() + wait_s
    while True:
        found = [f"process {pid} {comm}"
                 for pid, comm in _live_processes("environ", lambda e: needle in e)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def reap(env: Env) -> None:
    for pid in env.anchors:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _drained() -> str:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T %E"], env=slurm_env(),
                         capture_output=True, text=True, timeout=30).stdout
    return out.strip() if any(w in out for w in ("drain", "drng", "down")) else ""


def _make_env(user: User) -> Iterator[Env]:
    work = BASE / f"{user.name}-{uuid.uuid4().hex[:8]}"
    work.mkdir(mode=0o755)
    root = work / "root"
    env = Env(user=user, work=work, root=root, log=work / "log.json")
    env.chown(work)
    yield env
    # best effort: never leave a container of a failed test behind
    if root.exists():
        for cdir in root.iterdir():
            if cdir.is_dir():
                subprocess.run(env.cmd("delete", "--force", cdir.name, log=False),
                               env=user.env(), capture_output=True, timeout=120)
    reap(env)
    shutil.rmtree(work, ignore_errors=True)
    drained = _drained()
    if drained:
        # resume so one broken step does not fail every later test, but report it
        subprocess.run(["scontrol", "update", f"nodename={socket.gethostname().split('.')[0]}",
                        "state=resume"], env=slurm_env(), capture_output=True, timeout=30)
        pytest.fail(f"the test left the node drained: {drained}")


@pytest.fixture(params=["user", "root"])
def env(request: pytest.FixtureRequest, cluster: Path) -> Iterator[Env]:
    """Each test runs as the ordinary test user and as root."""
    name = TEST_USER if request.param == "user" else "root"
    yield from _make_env(User.named(name))


@pytest.fixture
def user_env(cluster: Path) -> Iterator[Env]:
    """The ordinary (rootless) test user only."""
    yield from _make_env(User.named(TEST_USER))


def staged_bundle(user: User, cid: str) -> Path:
    """Where the site cluster's scrun.lua (lua/scrun-staging.lua with its STAGING_BASE on
    the scratch, docs/site.md) stages container CID's bundle: `state` reports it there."""
    return Path(STAGING_BASE.replace("%u", str(user.uid))) / cid


def state_bundle(env: Env, cid: str, bundle: Bundle) -> str:
    """The bundle `state` reports for container CID made from BUNDLE with the cluster's own
    scrun.lua: the bundle itself, or its staged copy on the site cluster."""
    return str(staged_bundle(env.user, cid) if SITE else bundle.path)


def site_staging_script(conf_dir: Path) -> Path:
    """lua/scrun-staging.lua as the tests' cluster has it installed, copied into CONF_DIR:
    on the site cluster with its two settings on the scratch (the shipped /tmp default is
    refused for a job on another node)."""
    text = (REPO_ROOT / "lua" / "scrun-staging.lua").read_text()
    if SITE:
        site = re.sub(r'(?m)^local STAGING_BASE = .*$',
                      f'local STAGING_BASE = "{STAGING_BASE}"', text)
        site = re.sub(r'(?m)^local CACHE_BASE = .*$', f'local CACHE_BASE = "{CACHE_BASE}"', site)
        assert site != text, "lua/scrun-staging.lua: no STAGING_BASE setting"
        text = site
    (conf_dir / "scrun.lua").write_text(text)
    return conf_dir / "scrun.lua"


@pytest.fixture
def conf_dir(cluster: Path) -> Iterator[Path]:
    """A copy of the cluster's config dir that a test may break (oci.conf, scrun.lua)."""
    d = BASE / f"conf-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o755)
    for name in ("slurm.conf", "oci.conf", "cgroup.conf"):
        if (STATE / name).exists():
            shutil.copy(STATE / name, d / name)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# -- helpers for the reliability tests (bad input, faults, load, security) ------------------


def run_in_work(env: Env, *args: str, conf: Path | None = None, timeout: float = 120,
                extra_env: dict[str, str] | None = None, log: bool = True,
                ) -> subprocess.CompletedProcess[str]:
    """`env.run` from the test's work dir: a job it makes has WorkDir == env.work, so
    `active_jobs` finds this test's jobs even while other sessions use the same user."""
    return subprocess.run(env.cmd(*args, conf=conf, log=log),
                          env=env.user.env(**(extra_env or {})), cwd=env.work,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def active_jobs(env: Env, wait: float = 15) -> list[str]:
    """This test's jobs (WorkDir == env.work) that are not finished; waits out COMPLETING."""
    deadline = time.monotonic() + wait
    while True:
        rows = [line.split("|") for line in squeue("-u", env.user.name, "-t", "all",
                                                   "-o", "%i|%T|%Z").splitlines()]
        found = [f"job {r[0]} {r[1]}" for r in rows if len(r) == 3 and r[2] == str(env.work)
                 and r[1] not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED",
                                  "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def anchor_processes(env: Env) -> list[int]:
    """Live anchors started for this test's --root: forked from create (create's
    command line), or `python -m scrun_py.anchor --spec-fd N` behind unshare, whose
    environment names the root (SCRUN_ROOT)."""
    found = []
    for pid, _ in _live_processes("cmdline", lambda c: b"scrun_py.anchor" in c
                                  or b"\0create\0" in c):
        if is_anchor_of(env.root, proc_file(pid, "cmdline"),
                        lambda pid=pid: proc_file(pid, "environ")):  # type: ignore[misc]
            found.append(pid)
    return found


def proc_file(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def is_anchor_of(root: Path, cmdline: bytes, environ: Callable[[], bytes]) -> bool:
    """Whether the process with `cmdline` (and `environ()`) is an anchor of `root`."""
    if f"\0--root\0{root}\0".encode() in cmdline and b"\0create\0" in cmdline:
        return True
    return (b"scrun_py.anchor\0--spec-fd\0" in cmdline
            and f"\0SCRUN_ROOT={root}\0".encode() in b"\0" + environ())


def spool_entries(root: Path) -> list[Path]:
    """What `root` (a --root directory) holds besides the memo of srun's release, which
    the anchor keeps there for every later container (slurm/release_memo.py)."""
    return [p for p in root.iterdir() if p.name != release_memo.MEMO_NAME]


def traces(env: Env, cid: str = "") -> list[str]:
    """Everything a failed or deleted container may leave: spool dirs, pid files,
    anchors, unfinished jobs of this test.  Must be empty."""
    found: list[str] = []
    if env.root.exists():
        found += [f"spool entry {p}" for p in spool_entries(env.root)]
    if cid and (env.work / f"{cid}.pid").exists():
        found.append("pid file")
    found += [f"anchor process {pid}" for pid in anchor_processes(env)]
    found += active_jobs(env)
    return found
