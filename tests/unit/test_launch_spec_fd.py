"""The anchor started as a new interpreter (behind `unshare` under rootless podman) gets
its spec on an inherited pipe, never on a command line: any local user can read
/proc/PID/cmdline, and execve refuses one argument over 128 KiB."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from scrun_py.anchor import handoff, launch, readiness
from scrun_py.anchor.handoff import AnchorSpec, BundleInfo, ConfigInfo, ProcessInfo
from scrun_py.base.invocation import Invocation

BIG = 200_000  # one annotation, over execve's 128 KiB limit for one argument


def _spec(tmp: Path, secret: str, ready_fd: int) -> AnchorSpec:
    """A spec with `secret` in the container's args and a 200 kB annotation.  Its
    imported SCRUN_PY_ALLOC_TIMEOUT is `secret` too: the anchor decodes it, then fails
    in its first checks (before anything exists in Slurm) with an error naming it."""
    bundle = tmp / "bundle"
    info = BundleInfo(
        path=str(bundle), rootfs=str(bundle / "rootfs"),
        config=ConfigInfo(ociVersion="1.0.2",
                          process=ProcessInfo(args=["app", f"--password={secret}"]),
                          annotations={"org.example.big": "x" * BIG}),
        imported_env={"SCRUN_PY_ALLOC_TIMEOUT": secret})
    return AnchorSpec(
        container_id="c1", root=str(tmp / "root"), orig_bundle=str(bundle), pid_file="",
        console_socket="", log_path="", log_format="text", debug=False, verbosity=0,
        slurm_conf=str(tmp / "slurm.conf"), ready_fd=ready_fd,
        created="2026-12-01T00:00:00.000000000Z", bundle_info=info.to_dict(),
        site_dir=str(tmp), lua_override=False)


def _secret() -> str:
    return f"s3cr3t-{uuid.uuid4().hex}"


def _failure(secret: str) -> str:
    return f"SCRUN_PY_ALLOC_TIMEOUT: not a number: {secret!r}"


def test_late_argv_holds_no_part_of_the_spec(tmp_path: Path) -> None:
    """The command line names the fd only: no secret, no annotation, nothing long."""
    secret = _secret()
    spec = _spec(tmp_path, secret, ready_fd=5)
    prefix = ["unshare", "--user", "--map-user=1000", "--map-group=1000", "--"]
    argv = launch.late_argv(prefix, 7)
    assert [*prefix, sys.executable, "-P", "-m", "scrun_py.anchor", "--spec-fd", "7"] == argv
    joined = "\0".join(argv)
    assert secret not in joined
    assert "x" * 100 not in joined
    assert spec.to_json() not in joined
    assert max(len(a) for a in argv) < 4096


def test_read_spec_gets_a_spec_larger_than_the_pipe_buffer() -> None:
    data = os.urandom(300_000)
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    writer = threading.Thread(target=launch.write_spec, args=(write_fd, data))
    writer.start()
    got = handoff.read_spec(read_fd)
    writer.join(10)
    assert data == got
    for fd in (read_fd, write_fd):  # both closed
        with pytest.raises(OSError):
            os.fstat(fd)


def test_write_spec_to_a_pipe_without_reader_raises_and_closes() -> None:
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    os.close(read_fd)
    with pytest.raises(BrokenPipeError):
        launch.write_spec(write_fd, b"{}")
    with pytest.raises(OSError):
        os.fstat(write_fd)


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def test_anchor_main_reads_its_spec_from_the_fd(tmp_path: Path) -> None:
    """`python -P -m scrun_py.anchor --spec-fd N` reads a >64 KiB spec up to EOF and
    decodes it (its error names the secret, which only the spec holds); while it waits
    for the end of the spec, its command line does not hold the secret."""
    secret = _secret()
    ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
    spec_read, spec_write = os.pipe2(os.O_CLOEXEC)
    data = _spec(tmp_path, secret, ready_write).to_json().encode()
    assert len(data) > 65536
    with open(tmp_path / "err", "w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "scrun_py.anchor", "--spec-fd", str(spec_read)],
            pass_fds=(spec_read, ready_write), stdin=subprocess.DEVNULL, stdout=err,
            stderr=err)
    try:
        os.close(spec_read)
        os.close(ready_write)
        view = memoryview(data)
        while view:  # all of it, the pipe kept open: the anchor waits for EOF
            view = view[os.write(spec_write, view):]
        assert proc.poll() is None
        cmdline = _cmdline(proc.pid)
        assert b"--spec-fd" in cmdline
        assert secret.encode() not in cmdline
        os.close(spec_write)
        result = readiness.read_result(ready_read, 60)
        assert 1 == proc.wait(60), (tmp_path / "err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(ready_read)
    assert {"ok": False, "kind": "ScrunError", "message": _failure(secret)} == result


def test_anchor_main_refuses_a_spec_on_its_command_line(tmp_path: Path) -> None:
    """The old form (the spec as argument) is a usage error, not a spec."""
    res = subprocess.run([sys.executable, "-P", "-m", "scrun_py.anchor", '{"root": "/x"}'],
                         capture_output=True, text=True, timeout=60, check=False,
                         stdin=subprocess.DEVNULL)
    assert (2, "usage: python -m scrun_py.anchor --spec-fd FD\n") == (res.returncode,
                                                                       res.stderr)


def test_anchor_main_without_a_spec_does_nothing() -> None:
    """create closed the pipe without writing: the anchor exits 0, having done nothing."""
    spec_read, spec_write = os.pipe2(os.O_CLOEXEC)
    os.close(spec_write)
    try:
        res = subprocess.run(
            [sys.executable, "-P", "-m", "scrun_py.anchor", "--spec-fd", str(spec_read)],
            pass_fds=(spec_read,), capture_output=True, text=True, timeout=60, check=False,
            stdin=subprocess.DEVNULL)
    finally:
        os.close(spec_read)
    assert (0, "") == (res.returncode, res.stderr)


class _Recorded:
    """subprocess.Popen, keeping every command line it was given."""

    argvs: list[list[str]]

    def __init__(self) -> None:
        self.argvs = []
        self._popen = subprocess.Popen

    def __call__(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        self.argvs.append(list(args))
        return self._popen(args, **kwargs)


def _inv() -> Invocation:
    return cast("Invocation", SimpleNamespace(slurm_conf=None))


def test_start_late_hands_the_spec_over_a_pipe(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """start_late's new-interpreter path (`env` standing in for `unshare`): a 200 kB
    spec reaches the anchor, which decodes it, and no command line holds any of it."""
    secret = _secret()
    recorded = _Recorded()
    monkeypatch.setattr(launch, "userns_prefix", lambda: ["env"])
    monkeypatch.setattr(subprocess, "Popen", recorded)
    ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
    spec = _spec(tmp_path, secret, ready_write)
    try:
        anchor = launch.start_late(_inv(), spec, ready_read)
        os.close(ready_write)
        result = readiness.read_result(ready_read, 60)
        assert 1 == anchor.wait()
    finally:
        os.close(ready_read)
    assert {"ok": False, "kind": "ScrunError", "message": _failure(secret)} == result
    assert 1 == len(recorded.argvs)
    argv = recorded.argvs[0]
    assert ["env", sys.executable, "-P", "-m", "scrun_py.anchor", "--spec-fd"] == argv[:-1]
    assert secret not in "\0".join(argv)


def test_start_late_reports_an_anchor_that_exits_before_its_spec(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter never ran (`false` standing in for a failing `unshare`): the
    spec, larger than the pipe buffer, cannot be written, and start_late raises the
    OSError create reports as "cannot start the container anchor: …"."""
    monkeypatch.setattr(launch, "userns_prefix", lambda: ["false"])
    ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
    try:
        with pytest.raises(OSError) as info:
            launch.start_late(_inv(), _spec(tmp_path, _secret(), ready_write), ready_read)
    finally:
        os.close(ready_read)
        os.close(ready_write)
    assert "it exited before it read its spec (status 1)" == info.value.strerror
