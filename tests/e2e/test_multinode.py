"""Container jobs that span three nodes (docs/multinode.md).

Runs against the 3-node cluster of `scripts/cluster.sh up --slurm R --nodes 3` (test.sh
brings it up and points SCRUN_TEST_STATE at it): nodes n1..n3 on this machine, each
slurmd in its own UTS namespace, SlurmdTimeout=10.  Each container's bundle has no UTS
namespace of its own, so `hostname` inside it names the node its task runs on: the
place of every task is seen from the container, not taken from Slurm's variables.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import test_engines as engines
from tests.e2e.conftest import (
    REPO_ROOT,
    SCRATCH,
    TEST_USER,
    Bundle,
    Created,
    Env,
    User,
    _live_processes,
    leftovers,
    scontrol_job,
    slurm_env,
    slurm_release,
    squeue,
    traces,
)

pytestmark = pytest.mark.e2e

NODES = ["n1", "n2", "n3"]
# what each task prints about itself, one labelled line each
REPORT = ('echo "rank=$SLURM_PROCID local=$SLURM_LOCALID nodeid=$SLURM_NODEID '
          'node=$SLURMD_NODENAME host=$(hostname) ntasks=$SLURM_NTASKS '
          'nodelist=$SLURM_JOB_NODELIST stepnodes=$SLURM_STEP_NODELIST '
          'steptasks=$SLURM_STEP_NUM_TASKS step=$SLURM_STEP_ID"')
LABELLED = re.compile(r"^\s*(\d+): (.*)$")
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


@pytest.fixture(scope="module")
def nodes(cluster: Path) -> list[str]:
    """The multi-node cluster's nodes; a one-node cluster cannot run these tests."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], env=slurm_env(),
                         capture_output=True, text=True, timeout=30).stdout.split()
    found = sorted(set(out))
    if found != NODES:
        problem = (f"the cluster has nodes {found}, not {NODES}: run scripts/cluster.sh up "
                   "--nodes 3 and the env it prints (scripts/test.sh does)")
        pytest.skip(problem)
    return found


@pytest.fixture(scope="module")
def release(nodes: list[str]) -> tuple[int, int]:
    return slurm_release()


def on_scratch(lua: str) -> str:
    """lua/scrun-staging.lua's text with STAGING_BASE and CACHE_BASE on the shared scratch
    (scripts/cluster.sh makes it for the multi-node clusters), as a site sets them."""
    out = re.sub(r'(?m)^local STAGING_BASE = .*$',
                 f'local STAGING_BASE = "{SCRATCH}/%u/scrun-staging"', lua)
    out = re.sub(r'(?m)^local CACHE_BASE = .*$', f'local CACHE_BASE = "{SCRATCH}/%u/scrun-cache"',
                 out)
    assert f'local STAGING_BASE = "{SCRATCH}/' in out and f'local CACHE_BASE = "{SCRATCH}/' in out
    return out


def _bundle(env: Env, script: str, name: str = "bundle", pid_ns: bool = True) -> Bundle:
    """A busybox bundle sharing the node's hostname (no UTS namespace of its own)."""
    bundle = env.bundle(["sh", "-c", script], name=name, pid_ns=pid_ns)
    cfg = bundle.config()
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"]  # type: ignore[index]
                                  if n["type"] != "uts"]
    cfg.pop("hostname", None)
    bundle.config_file.write_text(json.dumps(cfg, indent=2))
    env.chown(bundle.path)
    return bundle


def labelled(text: str) -> dict[int, list[str]]:
    """srun --label output: the lines of each task."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        m = LABELLED.match(line)
        assert m, f"unlabelled line {line!r} in {text!r}"
        out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def reports(text: str) -> dict[int, dict[str, str]]:
    """The REPORT line of each task, as a dict."""
    found: dict[int, dict[str, str]] = {}
    for task, lines in labelled(text).items():
        for line in lines:
            if line.startswith("rank="):
                found[task] = dict(w.split("=", 1) for w in line.split())
    return found


def _wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _run_started(env: Env, cid: str, bundle: Bundle, **scrun: str) -> tuple[Created, int]:
    created = env.create(cid, bundle, env=env.user.env(SCRUN_LABELIO="1", **scrun))
    assert 0 == created.rc, created.stderr()
    start = env.run("start", cid)
    assert 0 == start.returncode, start.stderr
    return created, created.job_id()


def job_processes(job: int) -> list[str]:
    """Live processes of a job's tasks on any node (their environment names the job):
    runtimes and containers alike."""
    needle = f"SLURM_JOB_ID={job}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read():
                    continue
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        if stat.rpartition(") ")[2][:1] not in "ZX":
            found.append(f"{entry} {stat.partition('(')[2].rpartition(')')[0]}")
    return found


def runtime_states(env: Env, job: int) -> list[str]:
    """Containers of the job still known to the runtime (its state dir, shared by the
    nodes: containers are named <node>.<user>.<job>.<step>.<task>)."""
    root = Path(f"/tmp/ocistate-{env.user.name}")
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if f".{env.user.name}.{job}." in p.name)


def remove_runtime_states(env: Env, job: int) -> None:
    for name in runtime_states(env, job):
        subprocess.run(env.user.argv(["crun", "--rootless=true",
                                      f"--root=/tmp/ocistate-{env.user.name}", "delete",
                                      "--force", name]), capture_output=True, timeout=30)


def nothing_left(env: Env, cid: str, job: int) -> list[str]:
    deadline = time.monotonic() + 30
    # a multi-node job may stay COMPLETING a few seconds while each node's step ends
    while (squeue("-j", str(job), "-o", "%T").strip() == "COMPLETING"
           and time.monotonic() < deadline):
        time.sleep(0.5)
    found = leftovers(env, cid, [job])
    while (job_processes(job) or runtime_states(env, job)) and time.monotonic() < deadline:
        time.sleep(0.5)
    found += [f"process {p}" for p in job_processes(job)]
    found += [f"runtime state {s}" for s in runtime_states(env, job)]
    return found


def _cluster_sh(*args: str) -> subprocess.CompletedProcess[str]:
    release = os.environ.get("SCRUN_TEST_SLURM", "")
    argv = [str(REPO_ROOT / "scripts" / "cluster.sh"), *args, "--nodes", "3"]
    if release:
        argv += ["--slurm", release]
    env = {**os.environ, "WITH_ENGINES": "0"}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)


def _node_state(node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], env=slurm_env(),
                          capture_output=True, text=True, timeout=30).stdout.split()[0]


def _update_node(node: str, check: bool = True, **fields: str) -> None:
    subprocess.run(["scontrol", "update", f"nodename={node}",
                    *(f"{k}={v}" for k, v in fields.items())],
                   env=slurm_env(), check=check, capture_output=True, timeout=30)


@pytest.fixture
def drained_n3(nodes: list[str]) -> Iterator[str]:
    _update_node("n3", state="drain", reason="scrun-py-multinode-test")
    try:
        yield "n3"
    finally:
        if "drain" in _node_state("n3"):
            _update_node("n3", state="resume")
        _wait(lambda: _node_state("n3") in ("idle", "mixed", "allocated"), 60, "n3 back")


class TestRanks:
    def test_one_task_per_node(self, env: Env, nodes: list[str]) -> None:
        """SCRUN_JOB_NUM_NODES=3: a task on each node, each container knows its rank and
        place (on 22.05 through scrun_py.oci.taskenv in oci.conf), and every task's stdout
        and stderr reach the caller labelled (SCRUN_LABELIO)."""
        bundle = _bundle(env, f'{REPORT}; echo "stderr of $SLURM_PROCID" >&2')
        created, job = _run_started(env, "ranks", bundle, SCRUN_JOB_NUM_NODES="3")
        assert 0 == created.wait_exit()
        seen = reports(created.stdout())
        assert [0, 1, 2] == sorted(seen), created.stdout()
        for rank, node in enumerate(NODES):
            assert {"rank": str(rank), "local": "0", "nodeid": str(rank), "node": node,
                    "host": node, "ntasks": "3", "nodelist": "n[1-3]",
                    "stepnodes": "n[1-3]", "steptasks": "3", "step": "0"} == seen[rank]
        assert {0: ["stderr of 0"], 1: ["stderr of 1"], 2: ["stderr of 2"]} == labelled(
            created.stderr())
        assert "COMPLETED" == scontrol_job(job)["JobState"]
        assert 0 == env.run("delete", "ranks").returncode
        assert [] == nothing_left(env, "ranks", job)

    def test_nodelist(self, user_env: Env, nodes: list[str]) -> None:
        """SCRUN_JOB_NODELIST chooses the nodes: two tasks, on n1 and n3."""
        env = user_env
        bundle = _bundle(env, REPORT)
        created, job = _run_started(env, "nl", bundle, SCRUN_JOB_NUM_NODES="2",
                                    SCRUN_JOB_NODELIST="n[1,3]")
        assert 0 == created.wait_exit()
        seen = reports(created.stdout())
        assert {0: ("n1", "0"), 1: ("n3", "1")} == {
            r: (s["host"], s["nodeid"]) for r, s in seen.items()}
        assert {"n[1,3]"} == {s["nodelist"] for s in seen.values()}
        assert 0 == env.run("delete", "nl").returncode
        assert [] == nothing_left(env, "nl", job)

    def test_ntasks_one_per_node(self, user_env: Env, nodes: list[str]) -> None:
        """SCRUN_NTASKS=3 with SCRUN_NTASKS_PER_NODE=1: one task on each node (the way to
        ask for N tasks on 22.05)."""
        env = user_env
        bundle = _bundle(env, REPORT)
        created, job = _run_started(env, "n1pn", bundle, SCRUN_NTASKS="3",
                                    SCRUN_NTASKS_PER_NODE="1")
        assert 0 == created.wait_exit(), created.stderr()
        assert {0: ("n1", "0"), 1: ("n2", "0"), 2: ("n3", "0")} == {
            r: (s["host"], s["local"]) for r, s in reports(created.stdout()).items()}
        assert 0 == env.run("delete", "n1pn").returncode
        assert [] == nothing_left(env, "n1pn", job)

    def test_ntasks_alone(self, user_env: Env, release: tuple[int, int]) -> None:
        """SCRUN_NTASKS=3 alone: Slurm fills the 2-CPU nodes in order, two tasks on n1 and
        one on n2.  24.11 runs them; 22.05 cannot launch two container tasks on n1, so the
        step fails (the task on n2 is killed) and the anchor exits non-zero."""
        env = user_env
        bundle = _bundle(env, REPORT)
        created, job = _run_started(env, "nt", bundle, SCRUN_NTASKS="3")
        rc = created.wait_exit()
        if release < (23, 2):
            assert 0 != rc
            assert "launch failed" in created.stderr(), created.stderr()
        else:
            assert 0 == rc, created.stderr()
            assert {0: ("n1", "0"), 1: ("n1", "1"), 2: ("n2", "0")} == {
                r: (s["host"], s["local"]) for r, s in reports(created.stdout()).items()}
        assert 0 == env.run("delete", "nt").returncode
        assert [] == nothing_left(env, "nt", job)

    @pytest.mark.parametrize(("distribution", "places"), [
        ("", {0: ("n1", 0), 1: ("n1", 1), 2: ("n2", 0), 3: ("n2", 1), 4: ("n3", 0),
              5: ("n3", 1)}),
        ("cyclic", {0: ("n1", 0), 1: ("n2", 0), 2: ("n3", 0), 3: ("n1", 1), 4: ("n2", 1),
                    5: ("n3", 1)}),
    ])
    def test_two_tasks_per_node(self, user_env: Env, release: tuple[int, int],
                                distribution: str, places: dict[int, tuple[str, int]],
                                ) -> None:
        """SCRUN_NTASKS=6, SCRUN_NTASKS_PER_NODE=2 (and SCRUN_DISTRIBUTION): 24.11 lays
        the tasks out as srun does and tells each its rank.  slurmstepd 22.05 refuses a
        container step with more than one task on a node ("_modify_config: unexpected
        number of tasks 2 > 1"): the step fails at launch, the anchor exits non-zero and
        nothing is left."""
        env = user_env
        bundle = _bundle(env, REPORT)
        opts = {"SCRUN_JOB_NUM_NODES": "3", "SCRUN_NTASKS": "6", "SCRUN_NTASKS_PER_NODE": "2"}
        if distribution:
            opts["SCRUN_DISTRIBUTION"] = distribution
        created, job = _run_started(env, "tpn", bundle, **opts)
        rc = created.wait_exit()
        if release < (23, 2):
            assert 0 != rc
            assert "" == created.stdout()
            assert "launch failed" in created.stderr(), created.stderr()
        else:
            assert 0 == rc, created.stderr()
            seen = reports(created.stdout())
            assert places == {r: (s["host"], int(s["local"])) for r, s in seen.items()}
            assert all(str(r) == s["rank"] and s["host"] == s["node"]
                       and str(NODES.index(s["host"])) == s["nodeid"] and s["ntasks"] == "6"
                       for r, s in seen.items()), seen
        assert 0 == env.run("delete", "tpn").returncode
        assert [] == nothing_left(env, "tpn", job)


class TestExitStatus:
    def test_one_task_exits_5(self, user_env: Env, nodes: list[str]) -> None:
        """A task failing with 5 on one node (the others succeed): the anchor exits 5 and
        the job ends FAILED with 5, as srun reports the step; srun's own "n2: task 1:
        Exited with exit code 5" line does not reach the container's stderr."""
        env = user_env
        bundle = _bundle(env, '[ "$(hostname)" = n2 ] && exit 5; sleep 1; exit 0')
        created, job = _run_started(env, "five", bundle, SCRUN_JOB_NUM_NODES="3")
        assert 5 == created.wait_exit()
        assert "" == created.stderr()
        record = scontrol_job(job)
        assert ("FAILED", "5:0") == (record["JobState"], record["ExitCode"])
        assert 0 == env.run("delete", "five").returncode
        assert [] == nothing_left(env, "five", job)

    def test_one_task_killed_by_a_signal(self, user_env: Env, nodes: list[str]) -> None:
        """A task killed by SIGTERM on one node: the anchor exits 128+15."""
        env = user_env
        bundle = _bundle(env, '[ "$(hostname)" = n3 ] && kill -TERM $$; sleep 1; exit 0',
                         pid_ns=False)
        created, job = _run_started(env, "sig", bundle, SCRUN_JOB_NUM_NODES="3")
        assert 143 == created.wait_exit(), created.stderr()
        assert 0 == env.run("delete", "sig").returncode
        assert [] == nothing_left(env, "sig", job)


def _signal_records(env: Env) -> list[str]:
    """The anchor's --log records about signals (how `kill` was delivered)."""
    try:
        lines = env.log.read_text().splitlines()
    except OSError:
        return []
    return [line for line in lines if "signal" in line or "RunTimeKill" in line][-20:]


TRAP = ('trap \'echo "TERM on $(hostname)"; exit 7\' TERM; echo "up on $(hostname)"; '
        'while :; do sleep 0.2; done')


class TestSignals:
    def test_kill_reaches_every_node(self, env: Env, nodes: list[str]) -> None:
        """`kill CID TERM` reaches the container on every node: each TERM trap runs and
        the anchor exits with the trap's status."""
        bundle = _bundle(env, TRAP)
        created, job = _run_started(env, "trap", bundle, SCRUN_JOB_NUM_NODES="3")
        _wait(lambda: len(labelled(created.stdout())) == 3, 60, "every task up")
        kill = env.run("kill", "trap", "TERM")
        assert 0 == kill.returncode, kill.stderr
        assert 7 == created.wait_exit(timeout=60)
        got = labelled(created.stdout())
        assert {r: [f"up on {n}", f"TERM on {n}"] for r, n in enumerate(NODES)} == got
        assert 0 == env.run("delete", "trap").returncode
        assert [] == nothing_left(env, "trap", job)

    def test_delete_force_stops_every_node(self, user_env: Env, nodes: list[str]) -> None:
        """`delete --force` of a running 3-node container: every task's container stops
        and nothing of it is left on any node."""
        env = user_env
        bundle = _bundle(env, TRAP)
        created, job = _run_started(env, "del", bundle, SCRUN_JOB_NUM_NODES="3")
        _wait(lambda: len(labelled(created.stdout())) == 3, 60, "every task up")
        assert job_processes(job)
        delete = env.run("delete", "--force", "del")
        assert 0 == delete.returncode, delete.stderr
        assert 0 != created.wait_exit(timeout=60)
        assert [] == nothing_left(env, "del", job)

    def test_kill_reaches_every_task_of_a_node(self, user_env: Env,
                                               release: tuple[int, int]) -> None:
        """Two tasks per node: `kill` reaches both containers of each node (RunTimeKill
        runs once per local task id, %t).  22.05 cannot launch such a step at all."""
        env = user_env
        bundle = _bundle(env, TRAP)
        created, job = _run_started(env, "trap2", bundle, SCRUN_JOB_NUM_NODES="3",
                                    SCRUN_NTASKS_PER_NODE="2")
        if release < (23, 2):
            assert 0 != created.wait_exit()
            assert "launch failed" in created.stderr(), created.stderr()
            assert 0 == env.run("delete", "trap2").returncode
            assert [] == nothing_left(env, "trap2", job)
            return
        try:
            _wait(lambda: len(labelled(created.stdout())) == 6, 60, "every task up")
            assert 0 == env.run("kill", "trap2", "TERM").returncode
            _wait(lambda: sum(len(v) for v in labelled(created.stdout()).values()) >= 9, 30,
                  "the TERM traps")
            time.sleep(2)
            got = labelled(created.stdout())
            # the whole observation on failure (a dict message is cut short): every
            # task's lines, and how the anchor delivered the signal
            assert all(len(lines) == 2 for lines in got.values()), (
                f"{json.dumps(got)}\nanchor: {_signal_records(env)}\n"
                f"stderr: {created.stderr()[-1500:]}")
        finally:
            env.run("delete", "--force", "trap2")
            created.wait_exit(timeout=60)
            left = nothing_left(env, "trap2", job)
            remove_runtime_states(env, job)  # only if the test failed half-way
        assert [] == left


class TestFaults:
    def test_node_crash(self, user_env: Env, release: tuple[int, int]) -> None:
        """Every process of n2 SIGKILLed while a 3-node container runs (SlurmdTimeout=10):
        Slurm declares n2 down and ends the job, the containers on n1 and n3 stop (no
        process of the job is left anywhere), and the anchor exits non-zero.

        What is left is runtime state (crun's state dir entries, no process): the crashed
        node's, whose runtime was killed before it could remove it (a reboot clears it),
        and on 24.11 also the survivors': slurmstepd 24.11 SIGKILLs the runtime, then its
        cleanup asks the runtime about the container of task -1 (`n1.<user>.<job>.0.-1`),
        finds none, and deletes nothing.  `cluster.sh up`, which brings n2 back, removes
        the state of containers that no longer run, so some or all of it may be gone
        already; the test removes the rest."""
        env = user_env
        bundle = _bundle(env, 'echo "up on $(hostname)"; while :; do sleep 0.2; done')
        created, job = _run_started(env, "crash", bundle, SCRUN_JOB_NUM_NODES="3")
        _wait(lambda: len(labelled(created.stdout())) == 3, 60, "every task up")
        t0 = time.monotonic()
        try:
            crash = _cluster_sh("crash", "n2")
            assert 0 == crash.returncode, crash.stderr
            rc = created.wait_exit(timeout=240)
            elapsed = time.monotonic() - t0
        finally:
            up = _cluster_sh("up")
            assert 0 == up.returncode, up.stderr
            _wait(lambda: _node_state("n2") in ("idle", "mixed", "allocated"), 120, "n2 back")
        assert 0 != rc
        assert elapsed < 150
        state = scontrol_job(job)["JobState"]
        assert state in ENDED, state
        assert 0 == env.run("delete", "crash").returncode
        stale = [f"{n}.{env.user.name}.{job}.0.0"
                 for n in (["n2"] if release < (23, 2) else NODES)]
        left = nothing_left(env, "crash", job)
        assert set(left) <= {f"runtime state {s}" for s in stale}, left
        remove_runtime_states(env, job)
        assert [] == runtime_states(env, job)

    def test_up_sweeps_unreadable_runtime_state(self) -> None:
        """A runtime state directory crun cannot read (a runtime killed between removing
        its status file and the directory, as a node crash can leave it) is removed by
        `cluster.sh up`, which goes on: `crun state` fails on it, and that failure once
        ended `up` with exit 1 and no message, leaving the crashed node down."""
        broken = Path("/tmp/ocistate-0") / f"scrun-py-test-{uuid.uuid4().hex[:8]}"
        broken.mkdir(parents=True)
        try:
            probe = subprocess.run(["crun", f"--root={broken.parent}", "state", broken.name],
                                   capture_output=True, text=True, timeout=30)
            assert 0 != probe.returncode, probe.stdout  # what the sweep meets
            up = _cluster_sh("up")
            assert 0 == up.returncode, up.stderr
            assert "failed" not in up.stderr, up.stderr
            assert not broken.exists()
        finally:
            shutil.rmtree(broken, ignore_errors=True)

    def test_drained_node_with_alloc_timeout(self, user_env: Env, drained_n3: str) -> None:
        """n3 drained, SCRUN_JOB_NUM_NODES=3 and SCRUN_PY_ALLOC_TIMEOUT=8: the job cannot
        start, so create fails after the timeout with one line naming the allocation and
        leaves nothing (no job, no anchor, no spool dir)."""
        env = user_env
        bundle = _bundle(env, REPORT)
        t0 = time.monotonic()
        created = env.create("drn", bundle, env=env.user.env(SCRUN_JOB_NUM_NODES="3",
                                                             SCRUN_PY_ALLOC_TIMEOUT="8"))
        elapsed = time.monotonic() - t0
        assert 0 != created.rc
        assert 8 <= elapsed < 60
        err = created.stderr()
        assert 1 == len(err.splitlines()) and "job allocation" in err, err
        assert [] == traces(env, "drn")

    def test_drained_node_create_waits(self, user_env: Env, drained_n3: str) -> None:
        """n3 drained and no SCRUN_PY_ALLOC_TIMEOUT: create waits with the job pending;
        once n3 is resumed the job starts and the container runs on all three nodes."""
        env = user_env
        bundle = _bundle(env, REPORT)
        cid = "drw"
        out, err, pid_file = (env.work / f"{cid}.out", env.work / f"{cid}.err",
                              env.work / f"{cid}.pid")
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(
                env.cmd("create", "--bundle", str(bundle.path), "--pid-file", str(pid_file),
                        cid),
                env=env.user.env(SCRUN_JOB_NUM_NODES="3", SCRUN_LABELIO="1"),
                stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, cwd=env.work)
        try:
            _wait(lambda: "PENDING" in squeue("-u", env.user.name, "-t", "PD", "-o", "%T %Z")
                  and str(env.work) in squeue("-u", env.user.name, "-t", "PD", "-o", "%Z"),
                  60, "the job pending")
            time.sleep(2)
            assert proc.poll() is None, err.read_text()
            _update_node("n3", state="resume")
            assert 0 == proc.wait(timeout=120), err.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        created = Created(env, cid, 0, out, err, pid_file, int(pid_file.read_text()))
        env.anchors.append(created.anchor_pid)
        job = created.job_id()
        assert 0 == env.run("start", cid).returncode
        assert 0 == created.wait_exit()
        assert NODES == [s["host"] for _, s in sorted(reports(created.stdout()).items())]
        assert 0 == env.run("delete", cid).returncode
        assert [] == nothing_left(env, cid, job)


REMOTE_RECORDER = r"""
local OUT = %s
local function save(name, rc, out)
  local f = assert(io.open(OUT .. "/" .. name .. ".json", "w"))
  f:write(slurm.to_json({rc = rc, out = out})); f:close()
end
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  save("stage_in", slurm.remote_command('echo "$SLURMD_NODENAME $(hostname)"'))
  return slurm.SUCCESS
end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path,
                               spool_dir, config_file, job_id, user_id, group_id)
  save("stage_out", slurm.remote_command('echo "$SLURMD_NODENAME $(hostname)"'))
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""


class TestHooks:
    def test_remote_command_reaches_every_node(self, user_env: Env, conf_dir: Path,
                                               nodes: list[str]) -> None:
        """scrun.lua's slurm.remote_command runs once on every node of a 3-node job, in
        stage_in and in stage_out."""
        env = user_env
        out = env.work / "hook-out"
        out.mkdir()
        env.chown(out)
        (conf_dir / "scrun.lua").write_text(REMOTE_RECORDER % json.dumps(str(out)))
        bundle = _bundle(env, REPORT)
        created = env.create("rc", bundle, conf=conf_dir / "slurm.conf",
                             env=env.user.env(SCRUN_JOB_NUM_NODES="3", SCRUN_LABELIO="1"))
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", "rc", conf=conf_dir / "slurm.conf").returncode
        assert 0 == created.wait_exit(), created.stderr()
        for hook in ("stage_in", "stage_out"):
            got = json.loads((out / f"{hook}.json").read_text())
            assert 0 == got["rc"], got
            assert [f"{n} {n}" for n in NODES] == sorted(got["out"].splitlines()), got
        assert 0 == env.run("delete", "rc", conf=conf_dir / "slurm.conf").returncode
        assert [] == nothing_left(env, "rc", job)

    def test_shipped_staging_script_on_a_shared_path(self, user_env: Env, conf_dir: Path,
                                                     nodes: list[str]) -> None:
        """lua/scrun-staging.lua with a 3-node job and its bases on the shared scratch,
        as a site sets them: the rootfs is copied into the cache once, on the allocating
        host, and every node runs its tasks from overlays of that entry, each task with
        uppers of its own (a tmpfs on its node): a task's write is its own and does not
        come back; a second job of the image copies nothing."""
        env = user_env
        (conf_dir / "scrun.lua").write_text(on_scratch(
            (REPO_ROOT / "lua" / "scrun-staging.lua").read_text()))
        bundle = _bundle(env, 'cat /marker; hostname > /etc/task; sleep 1; '
                              'echo "on $(cat /etc/task)"')
        (bundle.path / "rootfs" / "marker").write_text("staged rootfs\n")
        cfg = bundle.config()
        cfg["root"]["readonly"] = False  # type: ignore[index]
        bundle.config_file.write_text(json.dumps(cfg, indent=2))
        env.chown(bundle.path)
        # the second job's bundle: the same content (cp -a keeps the mtimes the key
        # covers), as an engine gives each container a rootfs of its own; the first one's
        # gets what stage_out copies back (on 26.05, slurmstepd's spool dir mount point)
        again = Bundle(bundle.path.with_name("bundle-again"))
        subprocess.run(["cp", "-a", str(bundle.path), str(again.path)], check=True)
        cache = SCRATCH / str(env.user.uid) / "scrun-cache" / "entries"
        before = set(cache.iterdir()) if cache.is_dir() else set()
        for i, (cid, each) in enumerate((("stg", bundle), ("stg2", again))):
            created = env.create(cid, each, conf=conf_dir / "slurm.conf",
                                 env=env.user.env(SCRUN_JOB_NUM_NODES="3", SCRUN_LABELIO="1"))
            assert 0 == created.rc, created.stderr()
            job = created.job_id()
            staged = str(env.state(cid)["bundle"])
            assert staged != str(each.path)
            assert 0 == env.run("start", cid, conf=conf_dir / "slurm.conf").returncode
            assert 0 == created.wait_exit(), created.stderr()
            assert {r: ["staged rootfs", f"on {n}"] for r, n in enumerate(NODES)} == labelled(
                created.stdout()), created.stderr()
            assert staged.startswith(f"{SCRATCH}/{env.user.uid}/scrun-staging/"), staged
            assert not Path(staged).exists()
            assert not (each.path / "rootfs" / "etc" / "task").exists()
            assert 0 == env.run("delete", cid, conf=conf_dir / "slurm.conf").returncode
            assert [] == nothing_left(env, cid, job)
            said = [str(r.get("msg")) for r in env.log_records()
                    if f"scrun-staging: {cid}: " in str(r.get("msg"))]
            assert any("several tasks (SLURM_TASKS_PER_NODE=1(x3))" in m for m in said), said
            # the first job copies the rootfs into the cache, the second finds it there
            assert any(("is cached as" if i else "to the cache as") in m for m in said), said
            [entry] = set(cache.iterdir()) - before
            assert str(i + 1) == (entry / "uses").read_text().strip()

    def test_shipped_staging_script_refuses_a_node_local_base(self, user_env: Env,
                                                              conf_dir: Path,
                                                              nodes: list[str]) -> None:
        """lua/scrun-staging.lua as shipped, with a 3-node job: its STAGING_BASE on this
        machine's /tmp is refused with one line naming the setting and the job's nodes
        (at a site the nodes cannot see it); create fails and leaves nothing."""
        env = user_env
        shutil.copy(REPO_ROOT / "lua" / "scrun-staging.lua", conf_dir / "scrun.lua")
        bundle = _bundle(env, "true")
        created = env.create("stgno", bundle, conf=conf_dir / "slurm.conf",
                             env=env.user.env(SCRUN_JOB_NUM_NODES="3"))
        assert 0 != created.rc
        assert "Traceback" not in created.stderr()
        msgs = [str(r["msg"]) for r in env.errors()]
        assert any(re.search(r"STAGING_BASE /tmp/scrun-staging-%u is on this machine's own "
                             r"disk, which the job's nodes \(n\[1-3\]\) do not see", m)
                   for m in msgs), msgs
        assert [] == traces(env)


@pytest.fixture(params=["docker", "podman-root", "podman-rootless"])
def engine(request: pytest.FixtureRequest, nodes: list[str]) -> Iterator[engines.Engine]:
    """docker and podman (root and rootless) with scrun-py as their runtime, configured
    for the 3-node cluster by scripts/engines.sh (the docs' configuration)."""
    problem = engines._engine_problem()
    if problem:
        pytest.skip(problem)
    name, _, who = str(request.param).partition("-")
    user = User.named(TEST_USER if who == "rootless" else "root")
    yield from engines._guarded(engines.Engine(name, user))


ENGINE_REPORT = ('echo "rank=$SLURM_PROCID local=$SLURM_LOCALID nodeid=$SLURM_NODEID '
                 'node=$SLURMD_NODENAME ntasks=$SLURM_NTASKS"')
ENGINE_TRAP = ('trap \'echo "TERM on $SLURMD_NODENAME"; exit 7\' TERM; '
               'echo "up on $SLURMD_NODENAME"; while :; do sleep 0.2; done')


@pytest.mark.engines
class TestEngines:
    def test_ranks_and_exit_status(self, engine: engines.Engine) -> None:
        """`run -e SCRUN_JOB_NUM_NODES=3 -e SCRUN_LABELIO=1`: a task on each node, each
        knowing its rank and node; rank 1's exit 5 is the container's exit code."""
        res = engine.run("--rm", "-e", "SCRUN_JOB_NUM_NODES=3", "-e", "SCRUN_LABELIO=1",
                         engine.image, "sh", "-c",
                         f'{ENGINE_REPORT}; [ "$SLURM_PROCID" = 1 ] && exit 5; exit 0')
        assert 5 == res.returncode, res.stderr
        seen = reports(res.stdout)
        assert {r: {"rank": str(r), "local": "0", "nodeid": str(r), "node": n, "ntasks": "3"}
                for r, n in enumerate(NODES)} == seen

    def test_stop_reaches_every_node(self, engine: engines.Engine) -> None:
        """`stop` of a 3-node container: the TERM trap runs on every node and the trap's
        exit code is the container's."""
        # not test_engines' "scrunpy-" prefix: its clean-up removes every such container
        # of the (machine-wide) root and rootless podman stores, whichever cluster runs it
        name = f"scrunmn-{uuid.uuid4().hex[:8]}"
        res = engine.run("-d", "--name", name, "-e", "SCRUN_JOB_NUM_NODES=3", "-e",
                         "SCRUN_LABELIO=1", engine.image, "sh", "-c", ENGINE_TRAP)
        try:
            assert 0 == res.returncode, res.stderr
            _wait(lambda: engine.logs(name).count("up on") == 3, 60, "every task up")
            stop = engine("stop", "-t", "10", name)
            assert 0 == stop.returncode, stop.stderr
            assert ("exited", 7) == engine.exit_code(name)
            got = labelled(engine.logs(name))
            assert {r: [f"up on {n}", f"TERM on {n}"] for r, n in enumerate(NODES)} == got
        finally:
            rm = engine("rm", "-f", name)
        assert 0 == rm.returncode, rm.stderr


EXEC_NODE_ANNOTATION = "org.scrun-py.exec.node"


def _exec_process(env: Env, name: str, args: list[str], *extra: str) -> str:
    """A process.json as docker and podman pass it to `exec --process`."""
    path = env.work / name
    path.write_text(json.dumps({"terminal": False, "user": {"uid": 0, "gid": 0},
                                "args": args, "env": ["PATH=/usr/bin:/bin", *extra],
                                "cwd": "/"}))
    env.chown(path)
    return str(path)


def _exec_steps(job: int | None = None) -> list[str]:
    """The helper steps of `exec` still known to Slurm (of `job`, else of any job)."""
    args = ("--steps", "-h", "-o", "%i %j", *(("-j", str(job)) if job else ()))
    return [line for line in squeue(*args).splitlines() if line.endswith(" scrun-exec")]


def _exec_supervisors(env: Env) -> list[str]:
    """Live `scrun-py … exec` processes of this test's --root (the supervisors)."""
    root = str(env.root).encode()
    return [f"{pid} {comm}" for pid, comm in _live_processes(
        "cmdline", lambda c: b"\0exec\0" in c and root in c)]


class TestExec:
    def test_exec_on_task_0_node_or_the_named_one(self, user_env: Env,
                                                  nodes: list[str]) -> None:
        """`exec` into a 3-node container runs on task 0's node (n1), or on the node the
        process's SCRUN_EXEC_NODE names (n3); its exit status passes through; a node
        outside the job fails with one line and runs nothing; nothing is left: no helper
        step, no supervisor, no record, no process of the job."""
        env = user_env
        bundle = _bundle(env, 'echo "up on $(hostname)"; while :; do sleep 0.2; done')
        created, job = _run_started(env, "mx", bundle, SCRUN_JOB_NUM_NODES="3")
        try:
            _wait(lambda: len(labelled(created.stdout())) == 3, 60, "every task up")
            res = env.run("exec", "mx", "hostname")
            assert (0, "n1\n", "") == (res.returncode, res.stdout, res.stderr)
            res = env.run("exec", "--process", _exec_process(
                env, "p3.json", ["sh", "-c", "hostname; exit 7"], "SCRUN_EXEC_NODE=n3"), "mx")
            assert (7, "n3\n", "") == (res.returncode, res.stdout, res.stderr)
            for _ in range(3):  # srun alone chose n2 for the steps after the first
                res = env.run("exec", "mx", "hostname")
                assert (0, "n1\n") == (res.returncode, res.stdout), res.stderr
            res = env.run("exec", "--process", _exec_process(
                env, "p9.json", ["hostname"], "SCRUN_EXEC_NODE=n9"), "mx")
            assert (1, "") == (res.returncode, res.stdout)
            assert (f"scrun-py: exec: node 'n9' (SCRUN_EXEC_NODE of the process) is not one "
                    f"of the container's nodes (job {job}: n[1-3])\n") == res.stderr
            assert [] == _exec_steps(job)
            assert [] == _exec_supervisors(env)
            assert 3 == len(labelled(created.stdout())), "a task of the container ended"
        finally:
            env.run("delete", "--force", "mx")
            created.wait_exit(timeout=60)
        assert [] == nothing_left(env, "mx", job)

    def test_exec_on_the_annotated_node(self, user_env: Env, nodes: list[str]) -> None:
        """The container's annotation org.scrun-py.exec.node (config.json's at create)
        names the node of every exec; the process's SCRUN_EXEC_NODE wins over it."""
        env = user_env
        bundle = _bundle(env, "while :; do sleep 0.2; done", name="annotated")
        cfg = bundle.config()
        cfg["annotations"] = {EXEC_NODE_ANNOTATION: "n2"}
        bundle.config_file.write_text(json.dumps(cfg, indent=2))
        created, job = _run_started(env, "an", bundle, SCRUN_JOB_NUM_NODES="3")
        try:
            res = env.run("exec", "an", "hostname")
            assert (0, "n2\n", "") == (res.returncode, res.stdout, res.stderr)
            res = env.run("exec", "--process", _exec_process(
                env, "p1.json", ["hostname"], "SCRUN_EXEC_NODE=n1"), "an")
            assert (0, "n1\n", "") == (res.returncode, res.stdout, res.stderr)
        finally:
            env.run("delete", "--force", "an")
            created.wait_exit(timeout=60)
        assert [] == _exec_supervisors(env)
        assert [] == nothing_left(env, "an", job)

    @pytest.mark.engines
    def test_engine_exec_with_a_node(self, engine: engines.Engine) -> None:
        """`exec` through the engine into a 3-node container: task 0's node by default,
        `exec -e SCRUN_EXEC_NODE=n3` on n3 (the node is the one in the environment of
        the container's init there, which the exec'd process sees in its pid
        namespace), every time; the exit status passes through; no helper step is
        left."""
        name = f"scrunmn-{uuid.uuid4().hex[:8]}"
        node = "tr '\\0' '\\n' < /proc/1/environ | sed -n 's/^SLURMD_NODENAME=//p'"
        res = engine.run("-d", "--name", name, "-e", "SCRUN_JOB_NUM_NODES=3", engine.image,
                         "sh", "-c", "while :; do sleep 0.2; done")
        try:
            assert 0 == res.returncode, res.stderr
            _wait(lambda: engine.exit_code(name)[0] == "running", 60, "running")
            for _ in range(2):
                ex = engine("exec", name, "sh", "-c", node)
                assert (0, "n1\n") == (ex.returncode, ex.stdout), ex.stderr
                ex = engine("exec", "-e", "SCRUN_EXEC_NODE=n3", name, "sh", "-c",
                            f"{node}; exit 5")
                assert (5, "n3\n") == (ex.returncode, ex.stdout), ex.stderr
            assert [] == _exec_steps()
        finally:
            rm = engine("rm", "-f", name)
        assert 0 == rm.returncode, rm.stderr
