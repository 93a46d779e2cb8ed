"""A job allocation that pends for real: the container's job depends on a held job of the
test user's (`sbatch --hold`, which takes no CPU of the shared cluster, so other tests'
jobs never wait for it).  While it waits, `create` blocks; the anchor's info record in
--log names the job and Slurm's reason, `state` shows PENDING and the reason, squeue
shows the job under the container's name, and a
`create` whose stderr is a terminal says it there, once.  Once the held job is cancelled
the container's job runs: the annotations are gone, and the container starts and exits
as any other."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Env, slurm_env, squeue, traces, wait_anchor, wait_until

pytestmark = pytest.mark.e2e

STATE_KEY = "org.scrun-py.job.state"
REASON_KEY = "org.scrun-py.job.reason"
ALLOCATION_WAIT_S = 120.0


def hold_job(env: Env) -> int:
    """A job of the test's user that stays pending (held) until it is cancelled; made in
    the test's work dir, so `traces` would name it if it were left behind."""
    res = subprocess.run(
        env.user.argv(["sbatch", "--parsable", "--hold", "--job-name=scrun-py-blocker",
                       "--output=/dev/null", "--time=5", "--wrap", "sleep 300"]),
        env=env.user.env(), cwd=env.work, capture_output=True, text=True, timeout=60)
    assert 0 == res.returncode, res.stderr
    return int(res.stdout.strip().split(";")[0])


def scancel(job_id: int) -> None:
    subprocess.run(["scancel", str(job_id)], env=slurm_env(), capture_output=True, timeout=60)


def start_create(env: Env, cid: str, bundle: Path, stderr: int, depends_on: int,
                 ) -> subprocess.Popen[bytes]:
    """`create` in the background (it blocks while the job pends), its job depending on
    `depends_on`; stdout to <cid>.out."""
    with open(env.work / f"{cid}.out", "wb") as out:
        return subprocess.Popen(
            env.cmd("create", "--bundle", str(bundle), "--pid-file",
                    str(env.work / f"{cid}.pid"), cid),
            env=env.user.env(SCRUN_DEPENDENCY=f"afterany:{depends_on}"),
            stdin=subprocess.DEVNULL, stdout=out, stderr=stderr, cwd=env.work)


def pending_record(env: Env, cid: str) -> dict[str, object] | None:
    return next((r for r in env.log_records() if r.get("msg") == "job allocation pending"
                 and r.get("container_id") == cid), None)


def read_terminal(master: int, timeout_s: float = 30.0) -> bytes:
    """The terminal's output up to a whole line."""
    deadline = time.monotonic() + timeout_s
    out = b""
    while not out.endswith(b"\n") and time.monotonic() < deadline:
        if select.select([master], [], [], 0.1)[0]:
            out += os.read(master, 4096)
    return out


class TestPendingAllocation:
    def test_pending_then_running(self, env: Env) -> None:
        """Two containers wait for a held job: each has its info record (job id, reason
        Dependency) and `state` shows PENDING and Dependency; only the `create` on a
        terminal prints `scrun-py: pending job allocation N (reason: Dependency)`.
        Cancelling the held job lets both jobs run: the annotations are gone, both start,
        run and are deleted, and nothing is left behind."""
        bundle = env.bundle(["sh", "-c", "echo ran"])
        master, slave = os.openpty()
        blocker = hold_job(env)
        creates: dict[str, subprocess.Popen[bytes]] = {}
        try:
            creates["ontty"] = start_create(env, "ontty", bundle.path, slave, blocker)
            with open(env.work / "piped.err", "wb") as err:
                creates["piped"] = start_create(env, "piped", bundle.path, err.fileno(),
                                                blocker)
            os.close(slave)
            slave = -1
            wait_until(lambda: all(pending_record(env, c) for c in creates),
                       "the pending records", timeout=ALLOCATION_WAIT_S)
            jobs = {}
            for cid, proc in creates.items():
                rec = pending_record(env, cid)
                assert rec is not None
                assert ("info", "Dependency") == (rec["level"], rec["reason"])
                jobs[cid] = int(str(rec["job_id"]))
                # named after its container: what the user's `squeue --me` shows
                assert f"PENDING|Dependency|{cid}\n" == squeue("-j", str(jobs[cid]),
                                                               "-o", "%T|%r|%j")
                doc = env.state(cid)
                assert "creating" == doc["status"]
                annotations = doc["annotations"]
                assert isinstance(annotations, dict)
                assert ("PENDING", "Dependency") == (annotations.get(STATE_KEY),
                                                     annotations.get(REASON_KEY))
                assert proc.poll() is None  # create waits for the job
            line = f"scrun-py: pending job allocation {jobs['ontty']} (reason: Dependency)"
            assert f"{line}\r\n".encode() == read_terminal(master)
            scancel(blocker)
            for cid, proc in creates.items():
                assert 0 == proc.wait(timeout=ALLOCATION_WAIT_S), cid
                env.anchors.append(int((env.work / f"{cid}.pid").read_text()))
            assert b"" == (env.work / "piped.err").read_bytes()
            if select.select([master], [], [], 0.2)[0]:
                assert b"" == os.read(master, 4096)  # said once
            for cid, job in jobs.items():
                doc = env.state(cid)
                annotations = doc["annotations"]
                assert isinstance(annotations, dict)
                assert ("created", None, None) == (doc["status"], annotations.get(STATE_KEY),
                                                   annotations.get(REASON_KEY))
                assert 0 == env.run("start", cid).returncode
                assert 0 == wait_anchor(int(str(doc["pid"])))
                assert "ran\n" == (env.work / f"{cid}.out").read_text()
                assert 0 == env.run("delete", cid).returncode
                assert squeue("-j", str(job), "-o", "%T").strip() in ("", "COMPLETED",
                                                                       "COMPLETING")
            assert [] == traces(env)
        finally:
            scancel(blocker)
            for proc in creates.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for fd in (master, slave):
                if fd >= 0:
                    os.close(fd)
