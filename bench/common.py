"""What every bench shares: the test cluster's environment, the bundles, and the calls
of scrun-py and Slurm's scrun, each bounded in time."""

from __future__ import annotations

import json
import os
import pwd
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.site_install import as_user

__all__ = ["as_user"]

STATE = Path(os.environ.get("SCRUN_TEST_STATE", "/var/lib/scrun-py-test"))
SLURM_PREFIX = os.environ.get("SCRUN_TEST_SLURM_PREFIX", "")
SLURM_BIN = Path(SLURM_PREFIX, "bin") if SLURM_PREFIX else Path("/usr/bin")
REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
HANG_S = 60
VENV = Path(os.environ.get("SCRUN_TEST_VENV", "/opt/scrun-py/venv"))
USER = os.environ.get("SCRUN_TEST_USER", "scruntest")
SCRUN = str(VENV / "bin" / "scrun-py")
# the backends rows (bench/backends.py) need the pyslurm that scripts/pyslurm.sh builds
# into the test virtualenv: with --install site they run the test virtualenv's scrun-py
BACKENDS_SCRUN = os.environ.get("SCRUN_BENCH_BACKENDS_SCRUN", SCRUN)
APPLETS = ("sh", "true", "sleep", "echo")
ENGINES_SH = REPO / "scripts" / "engines.sh"
# podman (root) asks crun for nofile=1048576 and a large nproc; without CAP_SYS_RESOURCE
# crun's setrlimit fails, and conmon's own nproc hard limit is 32768 here
PODMAN_CRUN_ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")


@dataclass
class Ctx:
    """One run of the bench: the test user, their environment, the work directory (the
    bundles `true` and `sleep`), runs per timed row, and the counter of container ids."""

    pw: pwd.struct_passwd
    env: dict[str, str]
    work: Path
    n: int
    counter: Iterator[int]


class Hang(Exception):
    """A call of Slurm's scrun, or its anchor, did not end within HANG_S."""


def user_env(pw: pwd.struct_passwd) -> dict[str, str]:
    slurm = f"{SLURM_PREFIX}/bin:" if SLURM_PREFIX else ""
    return {"PATH": f"{VENV}/bin:{slurm}/usr/bin:/bin", "HOME": pw.pw_dir, "USER": pw.pw_name,
            "SLURM_CONF": str(STATE / "slurm.conf"), "XDG_RUNTIME_DIR": f"/run/user/{pw.pw_uid}"}


def make_bundle(path: Path, args: list[str]) -> None:
    for d in ("bin", "usr/bin", "proc", "dev", "sys", "tmp"):
        (path / "rootfs" / d).mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/busybox", path / "rootfs/bin/busybox")
    for a in APPLETS:
        for d in ("bin", "usr/bin"):
            (path / "rootfs" / d / a).symlink_to("/bin/busybox")
    subprocess.run(["crun", "spec", "--rootless"], cwd=path, check=True)
    cfg = json.loads((path / "config.json").read_text())
    cfg["process"].update(args=args, terminal=False)
    (path / "config.json").write_text(json.dumps(cfg))


def run(argv: list[str], env: dict[str, str], check: bool = True) -> None:
    res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         check=False,
                         stderr=subprocess.PIPE, timeout=300)
    if check and res.returncode != 0:
        raise RuntimeError(f"{argv}: {res.stderr.decode()[-500:]}")


def engine_env() -> dict[str, str]:
    """root's environment for docker and podman: `scripts/engines.sh env` (the engines
    find the cluster through their own configuration, so no SLURM_CONF)."""
    out = subprocess.run([str(ENGINES_SH), "env"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    # a release built into a prefix: its salloc/srun first (scrun-py takes them from PATH)
    slurm = f"{SLURM_PREFIX}/bin:" if SLURM_PREFIX else ""
    env = {"PATH": f"{slurm}/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/root",
           "LANG": "C.UTF-8"}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key] = value
    return env


def slurm_scrun() -> Path | None:
    """Slurm's own scrun of the release under test, if it has one."""
    exe = SLURM_BIN / "scrun"
    return exe if os.access(exe, os.X_OK) else None


def slurm_version(env: dict[str, str]) -> str:
    return subprocess.run(["srun", "--version"], capture_output=True, text=True, env=env,
                          check=False).stdout.strip()


def call(argv: list[str], env: dict[str, str]) -> None:
    try:
        res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, check=False,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=HANG_S)
    except subprocess.TimeoutExpired as exc:
        raise Hang(" ".join(argv[-2:])) from exc
    if res.returncode != 0:
        raise RuntimeError(f"{argv}: {res.stderr.decode()[-500:]}")


def wait_gone(pid: int, what: str) -> None:
    """Until the process is gone or a zombie (it is not our child)."""
    deadline = time.monotonic() + HANG_S
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat.rpartition(") ")[2][:1] in "ZX":
            return
        if time.monotonic() > deadline:
            raise Hang(what)
        time.sleep(0.002)


def wait_exact(proc: subprocess.Popen[bytes], what: str) -> int:
    """`proc`'s exit status as soon as it exits, bounded by HANG_S (Hang).  Not
    Popen.wait(timeout): it polls with sleeps that double up to 50 ms, so a process that
    exits after 45 ms is seen after 63 (a create of 16 ms after 16): the lifecycle row
    read 135 ms against 107 timed exactly, and the ratio 2.18x against 1.85x."""
    fd = os.pidfd_open(proc.pid)
    try:
        exited, _, _ = select.select([fd], [], [], HANG_S)
    finally:
        os.close(fd)
    if not exited:
        proc.kill()
        proc.wait()
        raise Hang(what)
    return proc.wait()


def create_bounded(base: list[str], env: dict[str, str], bundle: Path, pid_file: Path,
                   cid: str) -> int:
    """`create`, bounded by HANG_S (Hang); the anchor's pid.  Its stdio is never a pipe
    we read: the anchor keeps it (the container's stdio)."""
    proc = subprocess.Popen([*base, "create", "--bundle", str(bundle), "--pid-file",
                             str(pid_file), cid], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rc = wait_exact(proc, f"create {cid}")
    if rc != 0:
        raise RuntimeError(f"create {cid}: exit {rc}")
    return int(pid_file.read_text())


def anchor_of(base: list[str], cid: str, reported: int) -> int:
    """The anchor behind the pid `create` reported: scrun-py reports its container's pid
    process (anchor/nsholder.py) and keeps the anchor's in the record under --root;
    Slurm's scrun reports its anchor."""
    root = base[base.index("--root") + 1] if "--root" in base else ""
    try:
        record = json.loads(Path(root, cid, "state.json").read_text())
        return int(record.get("anchor_pid") or reported)
    except (OSError, ValueError, TypeError):
        return reported


def end_container(cid: str, env: dict[str, str]) -> None:
    """After a hang: kill what Slurm's scrun left for this container id (its processes
    carry the title `scrun: <id>`) and cancel its job (the job's ContainerID)."""
    title = f"scrun: {cid}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(title):
                    os.kill(int(entry), 9)
            except OSError:
                pass
    out = subprocess.run(["scontrol", "show", "job", "-o"], env=env, capture_output=True,
                         text=True, timeout=60, check=False).stdout
    for line in out.splitlines():
        if f" ContainerID={cid} " in f" {line} " and "JobState=RUNNING" in line:
            subprocess.run(["scancel", line.split()[0].partition("=")[2]], env=env,
                           check=False, timeout=60)
