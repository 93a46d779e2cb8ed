"""Values an image or a caller hands scrun-py that no process can take, and files that
must not be read as they are: a NUL byte in config.json's strings is refused at
`create` (one line, one record, nothing left), the same in exec's process, and exec's
--process and config.json are read through base/callerpath (a FIFO, a device or a huge
file refused at once)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scrun_py.base.errors import ScrunError
from scrun_py.commands import exec as exec_verb
from scrun_py.oci import bundle as oci_bundle
from tests.unit.cli_run import run as run_cli
from tests.unit.fake_slurm import FakeSlurm
from tests.unit.test_launch import _processes_naming
from tests.unit.test_ps import World

#: config.json's fields → the problem create reports (after `bundle B: config.json: `)
NUL_CASES = [
    ({"env": ["PATH=/bin", "SCRUN_WORKING_DIR=/tmp\0x"]},
     "process.env[1] (SCRUN_WORKING_DIR): contains a NUL byte"),
    ({"env": ["SCRUN_\0JOB_NAME=x"]}, "process.env[0] ('SCRUN_\\x00JOB_NAME'): contains a NUL "
                                      "byte"),
    ({"env": ["HOME=/\0"]}, "process.env[0] (HOME): contains a NUL byte"),
    ({"args": ["sh", "-c", "true\0"]}, "process.args[2]: contains a NUL byte"),
    ({"cwd": "/w\0"}, "process.cwd: contains a NUL byte"),
    ({"annotations": {"org.example": "v\0"}},
     "annotations['org.example']: contains a NUL byte"),
    ({"annotations": {"k\0": "v"}}, "annotations: key 'k\\x00' contains a NUL byte"),
    ({"annotations": {"a=b": "v"}}, "annotations: key 'a=b' contains '=', which no "
                                    "environment variable's name (SCRUN_ANNOTATION_<key>) may"),
]


def _bundle(tmp_path: Path, fields: dict[str, Any]) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    process = {"args": ["true"], "env": ["PATH=/bin"], "cwd": "/"}
    process.update({k: v for k, v in fields.items() if k != "annotations"})
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": process,
              "annotations": fields.get("annotations", {})}
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


class TestBundle:
    @pytest.mark.parametrize(("fields", "problem"), NUL_CASES)
    def test_load_bundle_refuses(self, tmp_path: Path, fields: dict[str, Any],
                                 problem: str) -> None:
        bundle = _bundle(tmp_path, fields)
        with pytest.raises(ScrunError) as info:
            oci_bundle.load_bundle(bundle)
        assert f"bundle {bundle}: config.json: {problem}" == str(info.value)

    def test_plain_values_pass(self, tmp_path: Path) -> None:
        bundle = _bundle(tmp_path, {"env": ["SCRUN_JOB_NAME=a\nb", "E=é"],
                                    "annotations": {"org.example": "x=y"}})
        assert "" == oci_bundle.process_problem(oci_bundle.load_bundle(bundle).config)


class TestCreate:
    @pytest.mark.parametrize(("fields", "problem"), NUL_CASES)
    def test_refused_on_one_line_with_a_record_and_nothing_left(
            self, tmp_path: Path, tmp_root: Path, fake: FakeSlurm,
            capsys: pytest.CaptureFixture[str], fields: dict[str, Any], problem: str) -> None:
        """Exit 1, one line, one error record in --log, no traceback, no Slurm command,
        nothing in --root, no pid file."""
        bundle = _bundle(tmp_path, fields)
        log, pid_file = tmp_path / "log.json", tmp_path / "c1.pid"
        code = run_cli(["--root", str(tmp_root), "--log", str(log), "--log-format", "json",
                        "create", "--bundle", str(bundle), "--pid-file", str(pid_file), "c1"])
        message = f"bundle {bundle}: config.json: {problem}"
        assert (1, f"scrun-py: {message}\n") == (code, capsys.readouterr().err)
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [("error", message)] == [(r["level"], r["msg"]) for r in records]
        assert [] == fake.calls
        assert [] == list(tmp_root.iterdir())
        assert not pid_file.exists()

    def test_through_the_fast_path(self, tmp_path: Path) -> None:
        """The engines' path (the anchor forked before the bundle is read): the same line,
        the early anchor ended, no container directory."""
        bundle = _bundle(tmp_path, NUL_CASES[0][0])
        root = tmp_path / "root"
        (tmp_path / "slurm.conf").write_text("")
        (tmp_path / "oci.conf").write_text('RunTimeRun="r %b" RunTimeKill="k" '
                                           'RunTimeDelete="d"\n')
        argv = [sys.executable, "-c", "from scrun_py.entry import main; main()", "--root",
                str(root), "-f", str(tmp_path / "slurm.conf"), "--log",
                str(tmp_path / "log.json"), "--log-format", "json", "create", "--bundle",
                str(bundle), "c1"]
        with open(tmp_path / "err", "w+") as err:  # a file: a pipe would wait for the anchor
            res = subprocess.run(argv, stdout=err, stderr=err, timeout=60, check=False,
                                 stdin=subprocess.DEVNULL)
        message = f"bundle {bundle}: config.json: {NUL_CASES[0][1]}"
        assert (1, f"scrun-py: {message}\n") == (res.returncode,
                                                 (tmp_path / "err").read_text())
        record = json.loads((tmp_path / "log.json").read_text())
        assert ("error", message) == (record["level"], record["msg"])
        assert [] == _processes_naming(str(root))
        assert not (root / "c1").exists()


def _process_file(tmp_path: Path, **fields: object) -> str:
    doc: dict[str, object] = {"args": ["echo", "hi"], "env": ["PATH=/bin"], "cwd": "/"}
    doc.update(fields)
    path = tmp_path / "process.json"
    path.write_text(json.dumps(doc))
    return str(path)


class TestExecProcess:
    @pytest.mark.parametrize(("fields", "problem"), [
        ({"args": ["echo", "a\0b"]}, "process: args[1]: contains a NUL byte"),
        ({"env": ["PATH=/bin", "SCRUN_EXEC_NODE=n\0"]},
         "process: env[1] (SCRUN_EXEC_NODE): contains a NUL byte"),
        ({"cwd": "/\0"}, "process: cwd: contains a NUL byte"),
    ])
    def test_nul_refused(self, tmp_path: Path, fields: dict[str, object],
                         problem: str) -> None:
        with pytest.raises(ScrunError) as info:
            exec_verb.load_process(_process_file(tmp_path, **fields), [], False, "/b")
        assert problem == str(info.value)

    def test_nul_in_the_bundle_config(self, tmp_path: Path) -> None:
        """runc's positional form takes env and cwd from config.json."""
        (tmp_path / "config.json").write_text(json.dumps(
            {"process": {"args": ["x"], "env": ["A=\0"], "cwd": "/"}}))
        with pytest.raises(ScrunError, match=r"^process: env\[0\] \(A\): contains a NUL"):
            exec_verb.load_process(None, ["ls"], False, str(tmp_path))


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


def _huge(tmp_path: Path) -> str:
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:
        fh.truncate(oci_bundle.MAX_CONFIG_BYTES + 1)
    return str(path)


class TestExecFiles:
    @pytest.mark.parametrize(("make", "why"), [
        (_fifo, "a FIFO, not a regular file: refusing it"),
        (lambda _tmp: "/dev/zero", "a character device, not a regular file: refusing it"),
        (_huge, f"process file of {oci_bundle.MAX_CONFIG_BYTES + 1} bytes, more than the "
                f"{oci_bundle.MAX_CONFIG_BYTES} scrun-py reads: refusing it"),
    ], ids=["fifo", "dev-zero", "huge"])
    def test_process_file_refused_at_once(self, world: World, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          make: Any, why: str) -> None:
        """Exit 1 within a second, one line in runc's `open PATH: reason` form, no srun."""
        world.container()
        path = make(tmp_path)
        started = time.monotonic()
        code = run_cli(["--root", str(world.root), "exec", "--process", path, "c1"])
        assert time.monotonic() - started < 1
        assert (1, f"scrun-py: open {path}: {why}\n") == (code, capsys.readouterr().err)
        assert not world.calls.exists()

    def test_bundle_config_fifo_refused(self, tmp_path: Path) -> None:
        """The positional form's config.json too."""
        config = tmp_path / "config.json"
        os.mkfifo(config)
        with pytest.raises(ScrunError) as info:
            exec_verb.load_process(None, ["ls"], False, str(tmp_path))
        assert f"open {config}: a FIFO, not a regular file: refusing it" == str(info.value)

    def test_deep_json_is_one_error(self, tmp_path: Path) -> None:
        path = tmp_path / "process.json"
        path.write_text("[" * 100_000)
        with pytest.raises(ScrunError, match=f"^process {path}: not JSON: "):
            exec_verb.load_process(str(path), [], False, "/b")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(tmp_path, monkeypatch)
