"""The anchor forked early by create's fast path: a create that fails leaves no process
and no directory behind."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rpartition(") ")[2][:1]
            except OSError:
                continue
            if text.encode() in cmdline and state != "Z":
                found.append(int(entry))
    return found


@pytest.mark.parametrize(("args", "message"), [
    (["--bundle", "{tmp}/nope"], "bundle {tmp}/nope: not a directory"),
    (["--bundle", "{tmp}", "--pid-file", "{tmp}/no/such/dir/pid"],
     "pid file directory does not exist: {tmp}/no/such/dir"),
    # the options are resolved after the fork
    (["--log", "syslog:x", "--bundle", "{tmp}"],
     "--log syslog:x: only a file ([file:]PATH) is supported; for syslog use "
     "SCRUN_SYSLOG_DEBUG"),
])
def test_failed_create_ends_the_early_anchor(tmp_path: Path, args: list[str],
                                             message: str) -> None:
    """The forked anchor never got a spec: it is gone when create exits, as is the
    container's directory."""
    root = tmp_path / "root"
    (tmp_path / "rootfs" / "bin").mkdir(parents=True)
    (tmp_path / "rootfs" / "bin" / "true").touch(mode=0o755)  # create looks it up
    (tmp_path / "config.json").write_text(
        '{"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["true"]}}')
    (tmp_path / "slurm.conf").write_text("")
    (tmp_path / "oci.conf").write_text('RunTimeRun="r %b" RunTimeKill="k" RunTimeDelete="d"\n')
    globals_ = args[:2] if args[0] == "--log" else []
    args = args[len(globals_):]
    argv = [sys.executable, "-c", "from scrun_py.entry import main; main()", "--root",
            str(root), "-f", str(tmp_path / "slurm.conf"), *globals_, "create",
            *[a.format(tmp=tmp_path) for a in args], "c1"]
    # files, not pipes: a pipe's reader would wait for every holder (the anchor too)
    with open(tmp_path / "err", "w+") as err:
        res = subprocess.run(argv, stdout=err, stderr=err, timeout=60, check=False,
                             stdin=subprocess.DEVNULL)
    assert (1, f"scrun-py: {message.format(tmp=tmp_path)}\n") == (
        res.returncode, (tmp_path / "err").read_text())
    assert [] == _processes_naming(str(root))  # ended and reaped before create exited
    assert not (root / "c1").exists()
