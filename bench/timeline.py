"""Per-process timeline of one container run through scrun-py (who runs what, and when).

    sudo /opt/scrun-py/venv/bin/python bench/timeline.py docker|podman|lifecycle [-n N] [-v]

Listens to the kernel's process events (netlink proc connector: fork, exec, exit with
CLOCK_MONOTONIC timestamps; root only, no tracing, no engine configuration changed)
while it runs `docker run --rm`, `podman run --rm` (the engines of scripts/engines.sh,
as root) or scrun-py's own create→start→exit→delete as the test user (like
bench/run.py).  It keeps the processes that belong to that one container: the engine
command and its descendants, every process whose argv names the container id, the
container's crun processes on the node (their name holds the job id) and all their
descendants.  It prints, for each run, the phases below; with -n N, the median of each
phase over N runs; with -v, every kept process (start, end, duration, argv).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# bench/run.py's environment and helpers; the checkout, not bench/, holds the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (
    PODMAN_CRUN_ULIMITS,
    SCRUN,
    USER,
    as_user,
    engine_env,
    make_bundle,
    user_env,
)

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_FORK = 0x1
PROC_EVENT_EXEC = 0x2
PROC_EVENT_EXIT = 0x80000000
_NLMSG = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT = struct.Struct("=IIQ")
_JOBID_RE = re.compile(r"--jobid[= ](\d+)")


@dataclass
class Proc:
    pid: int
    ppid: int = 0
    start_ns: int = 0
    end_ns: int = 0
    exit_status: int | None = None
    execs: list[tuple[int, list[str]]] = field(default_factory=list)

    @property
    def argv(self) -> list[str]:
        return self.execs[-1][1] if self.execs else []

    def text(self) -> str:
        return " ".join(" ".join(a) for _, a in self.execs)


class ProcEvents:
    """Collects fork/exec/exit events of every process on the machine, in a thread."""

    def __init__(self) -> None:
        self.procs: dict[int, list[Proc]] = {}
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, CN_IDX_PROC))
        body = struct.pack("=I", PROC_CN_MCAST_LISTEN)
        cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(body), 0) + body
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(cn), 3, 0, 0, os.getpid()) + cn)
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _current(self, pid: int, ts: int) -> Proc:
        lst = self.procs.setdefault(pid, [])
        if not lst or lst[-1].end_ns:
            lst.append(Proc(pid=pid, start_ns=ts))
        return lst[-1]

    def _loop(self) -> None:
        while not self.stopped:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            off = _NLMSG.size + _CN_MSG.size
            what, _cpu, ts = _EVENT.unpack_from(data, off)
            ev = off + _EVENT.size
            with self.lock:
                if what == PROC_EVENT_FORK:
                    _ppid, ptgid, cpid, ctgid = struct.unpack_from("=IIII", data, ev)
                    if cpid == ctgid:
                        lst = self.procs.setdefault(ctgid, [])
                        lst.append(Proc(pid=ctgid, ppid=ptgid, start_ns=ts))
                elif what == PROC_EVENT_EXEC:
                    pid, tgid = struct.unpack_from("=II", data, ev)
                    try:
                        raw = Path(f"/proc/{tgid}/cmdline").read_bytes()
                    except OSError:
                        raw = b"?"
                    argv = raw.rstrip(b"\0").decode(errors="replace").split("\0")
                    self._current(tgid, ts).execs.append((ts, argv))
                elif what == PROC_EVENT_EXIT:
                    pid, tgid, code, _sig = struct.unpack_from("=IIII", data, ev)
                    if pid == tgid:
                        p = self._current(tgid, ts)
                        p.end_ns, p.exit_status = ts, code

    def close(self) -> list[Proc]:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with self.lock:
            return [p for lst in self.procs.values() for p in lst]


def select(procs: list[Proc], t0: int, t1: int, root_pid: int, cid: str) -> list[Proc]:
    """The processes of this one container run, in the window [t0, t1]."""
    procs = [p for p in procs if p.start_ns >= t0 and p.start_ns <= t1]
    children: dict[int, list[Proc]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    def closure(seeds: list[Proc], keep: dict[int, Proc]) -> None:
        stack = list(seeds)
        while stack:
            p = stack.pop()
            if id(p) not in keep:
                keep[id(p)] = p
                stack.extend(c for c in children.get(p.pid, []) if c.start_ns >= p.start_ns)

    keep: dict[int, Proc] = {}
    closure([p for p in procs if p.pid == root_pid or cid in p.text()], keep)
    # the container's processes on the node: crun's container name holds the job id
    jobs = {m for p in keep.values() for m in _JOBID_RE.findall(p.text())}
    closure([p for p in procs if p.argv[:1] and p.argv[0].endswith("crun")
             and any(f".{j}." in p.text() for j in jobs)], keep)
    return sorted(keep.values(), key=lambda p: p.start_ns)


def first(procs: list[Proc], pred: Callable[[Proc], object]) -> Proc | None:
    return next((p for p in procs if pred(p)), None)


def is_verb(p: Proc, verb: str) -> bool:
    a = p.argv
    return any(os.path.basename(x) == "scrun-py" for x in a[:3]) and verb in a


def ms(a: int, b: int) -> float:
    return round((b - a) / 1e6, 1)


@dataclass
class Marks:
    """The processes of one run whose events mark its phases."""

    create: Proc
    anchor: Proc
    salloc: Proc | None
    holder: Proc | None
    start: Proc | None
    step: Proc | None
    crun: Proc | None
    deletes: list[Proc]
    hooks: list[Proc]


def marks(procs: list[Proc]) -> Marks | None:
    create = first(procs, lambda p: is_verb(p, "create"))
    # the anchor: forked from create (no exec), or `python -m scrun_py.anchor` behind
    # unshare (rootless podman)
    anchor = first(procs, lambda p: any("scrun_py.anchor" in x for x in p.argv)) or (
        create and first(procs, lambda p: p.ppid == create.pid and not p.execs))
    salloc = first(procs, lambda p: p.argv[:1] and p.argv[0].endswith("salloc"))
    holder = salloc and first(procs, lambda p: p.ppid == salloc.pid and p.execs)
    start = first(procs, lambda p: is_verb(p, "start"))
    step = first(procs, lambda p: p.argv[:1] and p.argv[0].endswith("srun")
                 and any(a.startswith("--container=") for a in p.argv))
    crun = first(procs, lambda p: p.argv[:1] and p.argv[0].endswith("crun") and "run" in p.argv)
    deletes = [p for p in procs if is_verb(p, "delete")]
    hooks = [p for p in procs if anchor and p.ppid == anchor.pid and p.argv[:1]
             and p.argv[0] in ("/bin/sh", "sh")]
    if create is None or not anchor:
        return None
    return Marks(create, anchor, salloc, holder or None, start, step, crun, deletes, hooks)


def create_phases(m: Marks, t0: int, out: dict[str, float]) -> None:
    c_exec = m.create.execs[0][0]
    a_start = m.anchor.execs[-1][0] if m.anchor.execs else m.anchor.start_ns
    out["engine → create exec"] = ms(t0, c_exec)
    out["create: CLI until anchor fork/exec"] = ms(c_exec, a_start)
    if m.salloc:
        out["anchor: fork/exec → salloc exec"] = ms(a_start, m.salloc.execs[0][0])
        if m.holder:
            out["salloc: exec → job granted"] = ms(m.salloc.execs[0][0], m.holder.execs[0][0])
            stage_in = [h for h in m.hooks if h.start_ns < m.create.end_ns]
            if stage_in:
                out["stage_in hook commands"] = ms(stage_in[0].start_ns, stage_in[-1].end_ns)
            out["granted → create exits"] = ms(m.holder.execs[0][0], m.create.end_ns)
    out["create total"] = ms(c_exec, m.create.end_ns)


def step_phases(m: Marks, start: Proc, step: Proc, out: dict[str, float]) -> None:
    out["start exec → step srun exec"] = ms(start.execs[0][0], step.execs[0][0])
    if m.crun:
        out["step srun exec → crun run exec"] = ms(step.execs[0][0], m.crun.execs[0][0])
        out["crun run (container lifetime)"] = ms(m.crun.execs[0][0], m.crun.end_ns)
        out["crun exit → step srun exit"] = ms(m.crun.end_ns, step.end_ns)
    out["step srun exit → anchor exit"] = ms(step.end_ns, m.anchor.end_ns)
    stage_out = [h for h in m.hooks if h.start_ns > step.end_ns]
    if stage_out:
        out["stage_out hook commands"] = ms(stage_out[0].start_ns, stage_out[-1].end_ns)
    if m.salloc and m.holder:
        out["job end: holder told → salloc exit"] = ms(
            max(stage_out[-1].end_ns if stage_out else step.end_ns, step.end_ns),
            m.salloc.end_ns)


def delete_phases(m: Marks, t_end: int, out: dict[str, float]) -> None:
    out["anchor exit → first delete exec"] = ms(m.anchor.end_ns, m.deletes[0].execs[0][0])
    for i, d in enumerate(m.deletes):
        out[f"delete #{i + 1} ({' '.join(a for a in d.argv if a == '--force') or 'plain'})"] \
            = ms(d.execs[0][0], d.end_ns)
    out["last delete exit → engine exit"] = ms(m.deletes[-1].end_ns, t_end)


def phases(procs: list[Proc], t0: int, t_end: int) -> dict[str, float]:
    """Named intervals (ms) between marker events of one run."""
    out: dict[str, float] = {}
    m = marks(procs)
    if m is None:
        return out
    create_phases(m, t0, out)
    if m.start:
        out["engine: create exit → start exec"] = ms(m.create.end_ns, m.start.execs[0][0])
        out["start total"] = ms(m.start.execs[0][0], m.start.end_ns)
        if m.step:
            step_phases(m, m.start, m.step, out)
    if m.deletes:
        delete_phases(m, t_end, out)
    out["scrun-py invocations"] = float(sum(
        1 for p in procs if any(is_verb(p, v) for v in ("create", "start", "state", "kill",
                                                        "delete"))))
    out["total (engine command)"] = ms(t0, t_end)
    return out


def show(procs: list[Proc], t0: int) -> None:
    depth: dict[int, int] = {}
    for p in procs:
        depth[p.pid] = depth.get(p.ppid, -1) + 1
        end = f"{(p.end_ns - t0) / 1e6:8.1f}" if p.end_ns else "       ?"
        dur = f"{(p.end_ns - p.start_ns) / 1e6:7.1f}" if p.end_ns else "      ?"
        argv = " ".join(p.argv)
        if len(argv) > 140:
            argv = argv[:137] + "..."
        print(f"{(p.start_ns - t0) / 1e6:8.1f} {end} {dur} {p.pid:7d} "
              f"{'  ' * min(depth[p.pid], 8)}{argv or '(fork)'}")


def one_run(mode: str, work: Path, n: int, verbose: bool) -> dict[str, float]:
    events = ProcEvents()
    time.sleep(0.05)
    cidfile = work / f"cid{n}"
    if mode == "lifecycle":
        import pwd

        pw = pwd.getpwnam(USER)
        env = user_env(pw)
        cid = f"tl{os.getpid()}x{n}"
        base = as_user(pw, [SCRUN, "--root", str(work / "root")])
        t0 = time.monotonic_ns()
        root_pid = os.getpid()
        subprocess.run([*base, "create", "--bundle", str(work / "true"), "--pid-file",
                        f"{work}/{cid}.pid", cid], env=env, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        subprocess.run([*base, "start", cid], env=env, check=True, stdin=subprocess.DEVNULL)
        pid = int(Path(f"{work}/{cid}.pid").read_text())
        while Path(f"/proc/{pid}").exists() and "Z" not in Path(
                f"/proc/{pid}/stat").read_text().split(") ")[1][:1]:
            time.sleep(0.002)
        subprocess.run([*base, "delete", cid], env=env, check=True, stdin=subprocess.DEVNULL)
        t_end = time.monotonic_ns()
    else:
        eng = engine_env()
        image = eng.get("SCRUN_TEST_IMAGE", "scrun-busybox")
        if mode == "podman":
            argv = ["podman", "run", "--rm", "--network", "none", *PODMAN_CRUN_ULIMITS,
                    "--runtime", "slurm", "--cidfile", str(cidfile), f"localhost/{image}",
                    "true"]
        else:
            argv = ["docker", "run", "--rm", "--network", "none", "--runtime", "slurm",
                    "--cidfile", str(cidfile), image, "true"]
        t0 = time.monotonic_ns()
        proc = subprocess.Popen(argv, env=eng, stdin=subprocess.DEVNULL)
        root_pid = proc.pid
        if proc.wait() != 0:
            raise RuntimeError(f"{argv} failed")
        t_end = time.monotonic_ns()
        cid = cidfile.read_text().strip()
    time.sleep(1.0)  # trailing exits (the job's end, a late delete)
    procs = select(events.close(), t0, time.monotonic_ns(), root_pid, cid)
    if verbose:
        print(f"--- {mode} run {n}: start_ms end_ms dur_ms pid argv")
        show(procs, t0)
    return phases(procs, t0, t_end)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("docker", "podman", "lifecycle"))
    ap.add_argument("-n", type=int, default=1)
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="scrun-timeline-", dir="/tmp"))
    os.chmod(work, 0o755)
    try:
        if opts.mode == "lifecycle":
            import pwd

            pw = pwd.getpwnam(USER)
            make_bundle(work / "true", ["true"])
            subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", str(work)], check=True)
        runs = [one_run(opts.mode, work, i, opts.verbose) for i in range(opts.n)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = list(dict.fromkeys(k for r in runs for k in r))
    print(f"| phase ({opts.mode}, median of {len(runs)}) | ms | min | max |")
    print("|---|---|---|---|")
    for name in names:
        vals = [r[name] for r in runs if name in r]
        print(f"| {name} | {statistics.median(vals):.0f} | {min(vals):.0f} | {max(vals):.0f} |")


if __name__ == "__main__":
    main()
