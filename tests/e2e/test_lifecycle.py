"""create → start → exit → delete on the real cluster, driven like an engine drives runc."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.e2e.conftest import Env, leftovers, scontrol_job, squeue, state_bundle, wait_status

pytestmark = pytest.mark.e2e


class TestLifecycle:
    def test_full_lifecycle_with_stdio_and_nothing_left(self, env: Env) -> None:
        """A container goes created → running → stopped as a real job, with stdin/stdout/
        stderr passed through, and delete leaves nothing behind."""
        bundle = env.bundle(["sh", "-c", "read x; echo got:$x; echo to-stderr >&2; exit 0"])
        r, w = os.pipe()
        created = env.create("life", bundle, stdin=r)
        os.close(r)
        assert 0 == created.rc, created.stderr()
        assert "" == created.stderr()
        pid = created.pid
        assert str(pid) == created.pid_file.read_text()  # no trailing newline
        doc = env.state("life")
        assert "created" == doc["status"]
        assert pid == doc["pid"]
        assert state_bundle(env, "life", bundle) == doc["bundle"]
        job = created.job_id()
        assert "life" == squeue("-j", str(job), "-o", "%j").strip()  # named after it
        assert "RUNNING" == squeue("-j", str(job), "-o", "%T").strip()
        assert "" == created.stdout()  # the step is launched on start, not before

        start = env.run("start", "life")
        assert 0 == start.returncode, start.stderr
        assert ("", "") == (start.stdout, start.stderr)
        assert "running" == wait_status(env, "life", "running")["status"]
        os.write(w, b"hello\n")
        os.close(w)
        assert 0 == created.wait_exit()
        doc = env.state("life")
        assert ("stopped", 0) == (doc["status"], doc["pid"])
        assert "got:hello\n" == created.stdout()
        assert "to-stderr" in created.stderr()
        assert "COMPLETED" == scontrol_job(job)["JobState"]

        delete = env.run("delete", "life")
        assert 0 == delete.returncode, delete.stderr
        assert [] == leftovers(env, "life", [job])
        assert [] == env.errors()

    def test_stderr_is_exactly_what_the_container_wrote(self, env: Env) -> None:
        """A non-zero exit: srun's own `task 0: Exited with exit code 3` report does not
        appear on the container's stderr; an unterminated last line arrives intact."""
        bundle = env.bundle(["sh", "-c", "echo out; echo err >&2; printf tail >&2; exit 3"])
        created = env.create("se", bundle)
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "se").returncode
        assert 3 == created.wait_exit()
        assert ("out\n", "err\ntail") == (created.stdout(), created.stderr())
        assert 0 == env.run("delete", "se").returncode

    @pytest.mark.parametrize("code", [0, 3, 42])
    def test_exit_code_is_the_anchor_exit_status(self, env: Env, code: int) -> None:
        """The anchor (the pid the engine reaps) exits with the container's exit code, and
        the job ends FAILED with that code when it is not 0."""
        bundle = env.bundle(["sh", "-c", f"exit {code}"])
        created = env.create("rc", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", "rc").returncode
        assert code == created.wait_exit()
        fields = scontrol_job(job)
        assert ("COMPLETED" if code == 0 else "FAILED") == fields["JobState"]
        assert f"{code}:0" == fields["ExitCode"]
        assert 0 == env.run("delete", "rc").returncode
        assert [] == leftovers(env, "rc", [job])

    @pytest.mark.parametrize(("sig", "expected"), [("TERM", 143), ("9", 137), ("SIGKILL", 137)])
    def test_kill_gives_128_plus_signal(self, env: Env, sig: str, expected: int) -> None:
        """kill ID TERM / kill ID 9 end a running container with 143 / 137."""
        # without a pid namespace the process is not an init, so TERM's default action applies
        bundle = env.bundle(["sleep", "300"], pid_ns=False)
        created = env.create("k", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", "k").returncode
        wait_status(env, "k", "running")
        time.sleep(0.5)
        res = env.run("kill", "k", sig)
        assert 0 == res.returncode, res.stderr
        assert expected == created.wait_exit(timeout=60)
        assert "stopped" == env.state("k")["status"]
        again = env.run("kill", "k", "TERM")
        assert 0 != again.returncode
        assert "container not running" in again.stderr
        assert 0 == env.run("delete", "k").returncode
        assert [] == leftovers(env, "k", [job])

    def test_trap_sees_the_signal_and_sets_the_exit_code(self, env: Env) -> None:
        """A signal reaches the container process itself: its trap runs and decides the
        exit code (Slurm would turn the step signal into kill+delete)."""
        bundle = env.bundle(["sh", "-c", 'trap "echo trapped; exit 7" USR1; '
                             "while :; do sleep 0.1; done"])
        created = env.create("trap", bundle)
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "trap").returncode
        wait_status(env, "trap", "running")
        time.sleep(0.5)
        assert 0 == env.run("kill", "trap", "USR1").returncode
        assert 7 == created.wait_exit(timeout=60)
        assert "trapped" in created.stdout()
        assert 0 == env.run("delete", "trap").returncode

    def test_delete_force_of_running_container(self, env: Env) -> None:
        """delete without --force refuses a running container; with --force it kills it,
        ends the job and removes everything."""
        bundle = env.bundle(["sleep", "300"])
        created = env.create("df", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("start", "df").returncode
        wait_status(env, "df", "running")
        refused = env.run("delete", "df")
        assert 0 != refused.returncode
        assert "cannot delete container df that is not stopped: running" in refused.stderr
        res = env.run("delete", "--force", "df")
        assert 0 == res.returncode, res.stderr
        assert 137 == created.wait_exit(timeout=60)
        assert [] == leftovers(env, "df", [job])

    def test_delete_of_created_container_ends_the_job(self, env: Env) -> None:
        """A container deleted before start never runs; its job ends and nothing is left."""
        bundle = env.bundle(["sh", "-c", "echo should-not-run"])
        created = env.create("dc", bundle)
        assert 0 == created.rc, created.stderr()
        job = created.job_id()
        assert 0 == env.run("delete", "dc").returncode
        created.wait_exit(timeout=60)
        assert "" == created.stdout()
        assert [] == leftovers(env, "dc", [job])

    def test_run_verb(self, env: Env) -> None:
        """`run` creates, starts, waits and exits with the container's code, then deletes."""
        bundle = env.bundle(["sh", "-c", "echo via-run; exit 5"])
        res = subprocess.run(env.cmd("run", "--bundle", str(bundle.path), "r1"),
                             env=env.user.env(), capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        assert 5 == res.returncode, res.stderr
        assert "via-run\n" == res.stdout
        assert not (env.root / "r1").exists()
