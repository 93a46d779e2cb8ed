"""anchor/nsholder.py: the container's pid, a small process in namespaces of its own.

Each case runs in a child process that is a child subreaper (as conmon and containerd's
shim are), so the orphaned holder is reparented to it and its exit status can be read,
as an engine reads it.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scrun_py.anchor import nsholder, waiter
from tests.unit.test_program_paths import bad_words

REPO = Path(__file__).resolve().parents[2]
PR_SET_CHILD_SUBREAPER = 36

CASE = r"""
import ctypes, json, os, signal, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
from scrun_py.anchor import nsholder
holder = nsholder.start()
if isinstance(holder, str) or not holder.settle():
    print(json.dumps({"error": holder if isinstance(holder, str) else holder.problem}))
    sys.exit(0)
seen, lost = [], []
holder.watch(seen.append, lambda: lost.append(True))
st = open(f"/proc/{holder.pid}/status").read()
out = {"pid": holder.pid, "parent": os.getpid(),
       "ppid": int(st.split("PPid:")[1].split()[0]),
       "nspid": st.split("NSpid:")[1].split("\n")[0].split(),
       "comm": open(f"/proc/{holder.pid}/comm").read().strip(),
       "exe": os.readlink(f"/proc/{holder.pid}/exe"),
       "cmdline": open(f"/proc/{holder.pid}/cmdline", "rb").read().decode().split("\0")[:-1],
       "net": os.readlink(f"/proc/{holder.pid}/ns/net") != os.readlink("/proc/self/ns/net"),
       "mnt": os.readlink(f"/proc/{holder.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"),
       "fds": sorted(os.readlink(f"/proc/{holder.pid}/fd/{fd}")
                     for fd in os.listdir(f"/proc/{holder.pid}/fd"))}
mode = sys.argv[1]
if mode == "signals":
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGWINCH):
        os.kill(holder.pid, sig)
        time.sleep(0.2)
    out["alive"] = holder.alive()
    holder.release(7)
elif mode == "kill":
    os.kill(holder.pid, signal.SIGKILL)
elif mode == "lost":
    os.close(holder._code_write)  # as if the anchor were killed
_, status = os.waitpid(holder.pid, 0)
time.sleep(0.2)
out.update(status=os.waitstatus_to_exitcode(status), seen=seen, lost=bool(lost),
           alive_after=holder.alive())
print(json.dumps(out))
"""


def _case(mode: str) -> dict[str, object]:
    res = subprocess.run([sys.executable, "-c", CASE, mode], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=False)
    assert 0 == res.returncode, res.stderr
    out: dict[str, object] = json.loads(res.stdout)
    if "error" in out:
        pytest.skip(f"namespaces cannot be made here: {out['error']}")
    return out


class TestHolder:
    def test_pid_1_of_its_own_namespaces_reaped_by_the_subreaper(self) -> None:
        """The holder is pid 1 of a new PID namespace, in new network and mount
        namespaces, orphaned at birth (its parent is the subreaper, not the process that
        made it), and exits with the code it is told."""
        out = _case("signals")
        assert out["ppid"] == out["parent"]  # the middle process exited: reparented
        assert "1" == out["nspid"][-1]  # type: ignore[index]
        assert nsholder.COMM == out["comm"]
        # the waiter is a shell, not the interpreter the anchor runs, and its command
        # line still ends with the one it was forked with
        assert os.path.realpath(waiter.SHELL) == out["exe"]
        cmdline: list[str] = out["cmdline"]  # type: ignore[assignment]
        assert ["/bin/sh", "-c"] == cmdline[:2]
        assert [nsholder.COMM, "3", "4", "5", sys.executable] == cmdline[3:8]
        assert "signals" == cmdline[-1]
        assert out["net"] and out["mnt"]
        assert 7 == out["status"]
        assert out["alive"] and not out["alive_after"]
        assert not out["lost"]

    def test_relays_the_signals_it_handles_and_drops_the_others(self) -> None:
        out = _case("signals")
        assert [signal.SIGUSR1, signal.SIGTERM] == out["seen"]  # WINCH: not relayed

    def test_keeps_only_its_own_descriptors(self) -> None:
        out = _case("signals")
        # /dev/null and its two pipe ends (the code pipe may be its stdin): nothing of
        # the anchor's
        fds: list[str] = out["fds"]  # type: ignore[assignment]
        assert {"/dev/null"} == {fd for fd in fds if not fd.startswith("pipe:")}
        assert 2 == len({fd for fd in fds if fd.startswith("pipe:")})

    def test_sigkill_is_seen_by_the_anchor(self) -> None:
        out = _case("kill")
        assert -signal.SIGKILL == out["status"]
        assert out["lost"]

    def test_anchor_gone_without_a_code_is_137(self) -> None:
        out = _case("lost")
        assert nsholder.ANCHOR_LOST_CODE == out["status"]


class TestWaiterFallback:
    def test_without_a_shell_the_holder_waits_itself(self, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
        """Where SHELL cannot be run, the holder relays and waits in its own process, as
        before: the same signals, the same exit code."""
        case = CASE.replace("from scrun_py.anchor import nsholder\n",
                            "from scrun_py.anchor import nsholder, waiter\n"
                            f"waiter.SHELL = {str(tmp_path / 'no-shell')!r}\n")
        res = subprocess.run([sys.executable, "-c", case, "signals"], cwd=REPO,
                             capture_output=True, text=True, timeout=60, check=False)
        assert 0 == res.returncode, res.stderr
        out = json.loads(res.stdout)
        if "error" in out:
            pytest.skip(f"namespaces cannot be made here: {out['error']}")
        assert os.path.realpath(sys.executable) == out["exe"]
        assert nsholder.COMM == out["comm"]
        assert [signal.SIGUSR1, signal.SIGTERM] == out["seen"]
        assert 7 == out["status"]


class TestPure:
    def test_the_waiter_is_one_line(self) -> None:
        """`podman top` and `ps` print the pid's command line as one row."""
        text = waiter.waiter_script(nsholder.RELAYED, nsholder.ANCHOR_LOST_CODE)
        assert 1 == len(text.splitlines())

    def test_the_waiter_looks_up_no_program(self) -> None:
        """Every word of the waiter is a shell builtin: nothing is found through PATH
        (the rule tests/unit/test_program_paths.py holds the package's scripts to)."""
        text = waiter.waiter_script(nsholder.RELAYED, nsholder.ANCHOR_LOST_CODE)
        assert [] == list(bad_words(text))

    def test_flags(self) -> None:
        base = nsholder.CLONE_NEWNET | nsholder.CLONE_NEWPID | nsholder.CLONE_NEWNS
        assert base == nsholder.unshare_flags(0)
        assert base | nsholder.CLONE_NEWUSER == nsholder.unshare_flags(1000)

    @pytest.mark.parametrize(("report", "expected"), [
        (b"pid 42\nok\n", (42, "")),
        (b"ok\npid 42\n", (42, "")),
        (b"error unshare: Operation not permitted\n", (None, "unshare: Operation not permitted")),
        (b"pid 42\nerror mount /proc: Permission denied\n",
         (None, "mount /proc: Permission denied")),
        (b"pid 42\n", (None, "the namespace holder exited before it was ready")),
        (b"", (None, "the namespace holder exited before it was ready")),
    ])
    def test_parse_report(self, report: bytes, expected: tuple[int | None, str]) -> None:
        assert expected == nsholder.parse_report(report)

    @pytest.mark.parametrize(("data", "code"), [(b"0", 0), (b"42", 42), (b"143", 143),
                                                (b"", 137), (b"junk", 137)])
    def test_wait_code(self, data: bytes, code: int) -> None:
        r, w = os.pipe()
        os.write(w, data)
        os.close(w)
        assert code == nsholder.wait_code(r)

    def test_drain_returns_at_eof_and_at_the_deadline(self) -> None:
        r, w = os.pipe()
        t0 = time.monotonic()
        nsholder.drain(r, 0.2)  # a writer remains: the deadline
        assert time.monotonic() - t0 >= 0.2
        os.close(w)
        t0 = time.monotonic()
        nsholder.drain(r, 5)
        assert time.monotonic() - t0 < 1
        os.close(r)


def test_unshare_refused_is_a_reason_not_a_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the namespaces cannot be made (user namespaces disabled), start says why
    and leaves no process: the anchor is then the pid (with a warning record)."""
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: _Refusing())
    before = set(os.listdir("/proc"))
    got = nsholder.start()
    assert not isinstance(got, str)
    assert (False, "unshare: Operation not permitted") == (got.settle(), got.problem)
    got.release(0)  # nothing to tell: no holder runs
    time.sleep(0.1)
    assert not [p for p in set(os.listdir("/proc")) - before
                if p.isdigit() and _parent(p) == os.getpid()]


class _Refusing:
    def unshare(self, flags: int) -> int:
        ctypes.set_errno(1)  # EPERM
        return -1


def _parent(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
