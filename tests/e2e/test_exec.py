"""`exec` on the real cluster, through scrun-py directly, as docker and podman call it
(`exec --process FILE [--detach --pid-file P] ID`) and in runc's positional form."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from tests.e2e.conftest import Env, leftovers, squeue, wait_anchor, wait_status, wait_until

pytestmark = pytest.mark.e2e


def process_file(env: Env, name: str, args: list[str]) -> str:
    path = env.work / name
    path.write_text(json.dumps({"terminal": False, "user": {"uid": 0, "gid": 0},
                                "args": args, "env": ["PATH=/usr/bin:/bin", "X=from-exec"],
                                "cwd": "/"}))
    env.chown(path)
    return str(path)


def helper_steps(job: int) -> list[str]:
    return [s for s in squeue("--steps", "-j", str(job), "-h", "-o", "%j").split()
            if s == "scrun-exec"]


class TestExec:
    def test_exec_into_running_container(self, env: Env) -> None:
        """`echo hi` prints hi and exits 0; `exit 7` gives 7; the process gets
        process.json's env; the positional form works; --detach returns at once and the
        supervisor whose pid is in --pid-file exits with the process's status; exec into
        a created or stopped container fails with runc's words; nothing is left behind."""
        created = env.create("ex", env.bundle(["sleep", "120"]))
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        try:
            res = env.run("exec", "--process", process_file(env, "p1.json", ["echo", "hi"]),
                          "ex")
            assert (1, "scrun-py: cannot exec in a created container (scrun-py runs a "
                    "container's processes only once it is started)\n") == (
                res.returncode, res.stderr)
            assert 0 == env.run("start", "ex").returncode
            wait_status(env, "ex", "running")

            res = env.run("exec", "--process", process_file(env, "p1.json", ["echo", "hi"]),
                          "ex")
            assert (0, "hi\n", "") == (res.returncode, res.stdout, res.stderr)
            res = env.run("exec", "--process",
                          process_file(env, "p2.json", ["sh", "-c", "exit 7"]), "ex")
            assert (7, "") == (res.returncode, res.stderr)
            res = env.run("exec", "--process",
                          process_file(env, "p3.json", ["sh", "-c", "echo $X; pwd"]), "ex")
            assert (0, "from-exec\n/\n") == (res.returncode, res.stdout)
            res = env.run("exec", "ex", "sh", "-c", "echo pos-$((6*7)) 100%")
            assert (0, "pos-42 100%\n") == (res.returncode, res.stdout)

            pid_file = env.work / "exec.pid"
            proc = subprocess.run(
                env.cmd("exec", "--process",
                        process_file(env, "p4.json", ["sh", "-c", "sleep 1; exit 3"]),
                        "--detach", "--pid-file", str(pid_file), "ex"),
                env=env.user.env(), capture_output=True, text=True, timeout=60,
                stdin=subprocess.DEVNULL)
            assert (0, "") == (proc.returncode, proc.stderr)
            supervisor = int(pid_file.read_text())
            assert 3 == wait_anchor(supervisor, timeout=60)
            assert [] == helper_steps(job)
        finally:
            env.run("delete", "--force", "ex")
        assert [] == leftovers(env, "ex", [job])

    def test_exec_into_stopped_container(self, env: Env) -> None:
        created = env.create("st", env.bundle(["true"]))
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        try:
            assert 0 == env.run("start", "st").returncode
            assert 0 == created.wait_exit()
            res = env.run("exec", "--process", process_file(env, "p.json", ["echo", "x"]), "st")
            assert (1, "scrun-py: cannot exec in a stopped container\n") == (
                res.returncode, res.stderr)
        finally:
            env.run("delete", "--force", "st")
        assert [] == leftovers(env, "st", [job])

    def test_signals(self, env: Env) -> None:
        """A signal to the supervisor reaches the exec'd process once (its trap runs
        once, three times in a row), and not its children (sleep is not ended by it):
        the node's runtime alone is signalled, and it relays the signal, as `runc exec`
        does.  A trap that exits gives the status.  SIGTERM ends a process without a
        trap, and the helper step with it.  No step is left either way."""
        import time

        created = env.create("sg", env.bundle(["sleep", "120"]))
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        try:
            assert 0 == env.run("start", "sg").returncode
            wait_status(env, "sg", "running")
            for trap, expected in ([("echo got-usr1", ("got-usr1\nend\n", "", 0))] * 3
                                   + [("echo got-usr1; exit 9", ("got-usr1\n", "", 9))]):
                proc = subprocess.Popen(
                    env.cmd("exec", "sg", "sh", "-c",
                            f"trap '{trap}' USR1; echo ready; n=0; "
                            "while [ $n -lt 10 ]; do sleep 0.2; n=$((n+1)); done; echo end"),
                    env=env.user.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL, text=True)
                assert proc.stdout is not None
                assert "ready\n" == proc.stdout.readline()
                time.sleep(0.5)
                proc.send_signal(signal.SIGUSR1)
                out, err = proc.communicate(timeout=60)
                assert expected == (out, err, proc.returncode)
            proc = subprocess.Popen(
                env.cmd("exec", "sg", "sh", "-c", "echo ready; while :; do sleep 0.2; done"),
                env=env.user.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL, text=True)
            assert proc.stdout is not None
            assert "ready\n" == proc.stdout.readline()
            time.sleep(0.5)
            proc.terminate()
            proc.communicate(timeout=60)
            assert 128 + signal.SIGTERM == proc.returncode
            wait_until(lambda: [] == helper_steps(job), "the helper step to end")
        finally:
            env.run("delete", "--force", "sg")
        assert [] == leftovers(env, "sg", [job])
