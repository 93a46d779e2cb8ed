"""What `ps` and `exec` run on the node, run here against a stand-in runtime: both wait
until the runtime knows the container there (`start` returns before the runtime has
created it on every node: a `ps` or `exec` right after start must not fail for that),
and the wait is bounded."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from scrun_py.slurm import node_step
from scrun_py.slurm.node_step import NodeRuntime, exec_command, ps_script

# a crun that knows the container once $MARK exists: `exec` and `ps` print what they
# were asked, `state` a document with the init pid ($INIT_PID, default 7)
STAND_IN_CRUN = """#!/bin/sh
[ -e "$MARK" ] || { echo "error opening file: No such file" >&2; exit 1; }
case "$1" in
  exec) shift; echo "exec $*"; echo "crun $$ $(cut -d' ' -f22 /proc/$$/stat)" >&2 ;;
  ps) echo "[7,8]" ;;
  state) echo "{\\"id\\": \\"x\\", \\"pid\\": ${INIT_PID:-7}, \\"status\\": \\"running\\"}" ;;
esac
"""

RUNTIME = NodeRuntime("crun kill %n.%u.%j.%s.%t", job_id=42, step_id=3)


def stand_in_env(tmp_path: Path, crun: str, **extra: str) -> dict[str, str]:
    """The environment of a node script whose `crun` is the script `crun` (in
    tmp_path/bin, first in PATH), on node n1, plus `extra`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "crun").write_text(crun)
    (bin_dir / "crun").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMD_NODENAME": "n1",
            **extra}


def node_run(tmp_path: Path, command: str, appear_after: float | None,
             crun: str = STAND_IN_CRUN) -> tuple[int, str, float]:
    """`command` as the node's /bin/sh runs it; the container appears after
    `appear_after` seconds (None: never).  Exit status, output, seconds taken."""
    mark = tmp_path / "created"
    env = stand_in_env(tmp_path, crun, MARK=str(mark))
    started = time.monotonic()
    proc = subprocess.Popen(["/bin/sh", "-c", command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    if appear_after is not None:
        time.sleep(appear_after)
        mark.touch()
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out, time.monotonic() - started


def node_id() -> str:
    return f"n1.{pwd.getpwuid(os.getuid()).pw_name}.42.3.0"


def marked(out: str) -> tuple[str, str]:
    """The node script's RUNTIME_MARKER line (its words) and the rest of `out`."""
    marker = node_step.RUNTIME_MARKER.decode()
    lines = out.splitlines(keepends=True)
    assert lines and lines[0].startswith(marker), out
    return lines[0][len(marker):].strip(), "".join(lines[1:])


class TestExec:
    def test_waits_for_the_container(self, tmp_path: Path) -> None:
        """...and first names the pid the runtime will have, its start time and the
        node on stderr."""
        command = exec_command(RUNTIME, ["exec", "--cwd=/"], ["hostname"])
        rc, out, took = node_run(tmp_path, command, 0.4)
        said, rest = marked(out)
        pid, start, node = said.split()
        assert (0, f"exec --cwd=/ {node_id()} hostname\ncrun {pid} {start}\n", "n1") == (
            rc, rest, node)
        assert took >= 0.4

    def test_the_wait_is_bounded(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A container the runtime never knows there: the runtime's exec runs after the
        bound and says why it fails."""
        monkeypatch.setattr(node_step, "NODE_WAIT_TENTHS", 3)
        command = exec_command(RUNTIME, ["exec", "--cwd=/"], ["hostname"])
        rc, out, took = node_run(tmp_path, command, None)
        assert (1, "error opening file: No such file\n") == (rc, marked(out)[1])
        assert 0.25 <= took < 10


class TestSignalScript:
    """What signals exec's runtime on its node signals the process of that pid only
    while it has the start time the marker said (a pid used again is left alone)."""

    @pytest.mark.parametrize("same_start", [True, False])
    def test_only_the_process_that_started_then(self, same_start: bool) -> None:
        import signal

        proc = subprocess.Popen(["sleep", "30"])
        try:
            with open(f"/proc/{proc.pid}/stat") as f:
                start = int(f.read().rsplit(")", 1)[1].split()[19])
            script = node_step.signal_script(
                (proc.pid, start if same_start else start + 1, "n1"), signal.SIGUSR1)
            subprocess.run(["/bin/sh", "-c", script], check=False, timeout=30)
            if same_start:
                assert -signal.SIGUSR1 == proc.wait(timeout=10)
            else:
                with pytest.raises(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.5)
        finally:
            proc.kill()
            proc.wait()

    def test_a_pid_that_is_gone(self) -> None:
        script = node_step.signal_script((2 ** 22 + 1, 5, "n1"), 10)
        assert 0 == subprocess.run(["/bin/sh", "-c", script], check=False).returncode


# a crun whose `exec --tty` says which of its stdio are terminals, writes its last words
# to stderr (as crun does with what is left in its pty) and exits with $STATUS
TTY_CRUN = """#!/bin/sh
case "$1" in
  state) exit 0 ;;
  exec) for fd in 0 1 2; do [ -t $fd ] && printf '%s:tty ' $fd || printf '%s:not ' $fd; done
        echo; echo last-words >&2; exit "${STATUS:-0}" ;;
esac
"""


def pty_run(tmp_path: Path, command: str, status: int) -> tuple[int, str]:
    """`command` as the node's /bin/sh runs it under srun's pty: stdio a terminal."""
    import pty

    env = stand_in_env(tmp_path, TTY_CRUN, STATUS=str(status))
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], env=env, stdin=slave,
                                stdout=slave, stderr=slave)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            out += chunk
        return proc.wait(timeout=30), out.decode().replace("\r\n", "\n")
    finally:
        os.close(master)


class TestExecWithATerminal:
    """crun writes what is left in its own pty when the process ends to its stderr, as a
    red time-stamped error record where that stderr is a terminal: with a terminal the
    runtime's stderr is a pipe whose bytes reach the terminal as they are."""

    @pytest.mark.parametrize("status", [0, 7])
    def test_stderr_is_no_terminal_and_the_status_passes(self, tmp_path: Path,
                                                         status: int) -> None:
        command = exec_command(RUNTIME, ["exec", "--tty"], ["sh"], terminal=True)
        rc, out = pty_run(tmp_path, command, status)
        assert (status, "0:tty 1:tty 2:not \nlast-words\n") == (rc, out)

    def test_without_a_terminal_the_runtime_replaces_the_shell(self) -> None:
        command = exec_command(RUNTIME, ["exec"], ["sh"])
        assert command.splitlines()[-1].startswith("exec crun ")
        assert "| cat" not in command


class TestPs:
    def test_waits_for_the_container(self, tmp_path: Path) -> None:
        rc, out, took = node_run(tmp_path, ps_script(RUNTIME), 0.4)
        assert (0, "[7,8]\n") == (rc, out)
        assert took >= 0.4

    def test_the_wait_is_bounded(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A container the runtime never knows there: after the bound, neither the
        runtime's ps nor its state answers, and the script fails with the runtime's
        words."""
        monkeypatch.setattr(node_step, "NODE_WAIT_TENTHS", 3)
        rc, out, took = node_run(tmp_path, ps_script(RUNTIME), None)
        assert (1, "error opening file: No such file\n") == (rc, out)
        assert 0.25 <= took < 10

    def test_without_a_cgroup_the_init_process_and_its_children(self, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 ) -> None:
        """The runtime's ps fails (rootless, no cgroup of its own): state's pid and its
        descendants from /proc."""
        init = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"])
        try:
            deadline = time.monotonic() + 10
            children = ""
            while not children and time.monotonic() < deadline:
                children = Path(f"/proc/{init.pid}/task/{init.pid}/children").read_text().strip()
                time.sleep(0.01)
            assert children
            monkeypatch.setenv("INIT_PID", str(init.pid))
            crun = STAND_IN_CRUN.replace('ps) echo "[7,8]" ;;', "ps) exit 1 ;;")
            rc, out, _ = node_run(tmp_path, ps_script(RUNTIME), 0.0, crun)
        finally:
            subprocess.run(["pkill", "-P", str(init.pid)], check=False)
            init.kill()
            init.wait()
        assert (0, f"[{init.pid},{children}]\n") == (rc, out)
