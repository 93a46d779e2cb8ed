"""`list` and `spec`: runc's output shapes, through the command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scrun_py.commands import list as list_verb
from scrun_py.commands import spec as spec_verb
from scrun_py.container import spool
from scrun_py.container.record import ContainerRecord
from tests.unit.cli_run import run

CREATED = "2024-01-02T03:04:05.000000Z"


def stored(root: Path, container_id: str, status: str, anchor_pid: int,
           **fields: object) -> Path:
    """A record on disk as an anchor leaves it."""
    cdir = Path(spool.make_container_dir(root, container_id))
    record = ContainerRecord(id=container_id, bundle=f"/b/{container_id}",
                                   rootfs=f"/b/{container_id}/rootfs", status=status,
                                   anchor_pid=anchor_pid, created=CREATED, owner="tuser",
                                   job_id=0)
    for key, value in fields.items():
        setattr(record, key, value)
    spool.save_record(root, record)
    return cdir


@pytest.fixture
def two(tmp_root: Path) -> Path:
    """c1 running (this process is its anchor, job 41) and c2 stopped (job 42)."""
    stored(tmp_root, "c2", "stopped", 4_194_305, job_id=42)
    stored(tmp_root, "c1", "running", os.getpid(), job_id=41,
           annotations={"org.example": "x"})
    return tmp_root


class TestList:
    def test_json(self, two: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """runc's objects in runc's key order, sorted by id, plus slurmJobId; a stopped
        container's pid is 0, annotations only where there are some."""
        assert 0 == run(["--root", str(two), "list", "--format", "json"])
        out = capsys.readouterr().out
        assert out.endswith("]\n") and 1 == out.count("\n")
        items = json.loads(out)
        assert [{"ociVersion": "1.0.2", "id": "c1", "pid": os.getpid(), "status": "running",
                 "bundle": "/b/c1", "rootfs": "/b/c1/rootfs", "created": CREATED,
                 "annotations": {"org.example": "x"}, "owner": "tuser", "slurmJobId": 41},
                {"ociVersion": "1.0.2", "id": "c2", "pid": 0, "status": "stopped",
                 "bundle": "/b/c2", "rootfs": "/b/c2/rootfs", "created": CREATED,
                 "owner": "tuser", "slurmJobId": 42}] == items
        assert ["ociVersion", "id", "pid", "status", "bundle", "rootfs", "created",
                "annotations", "owner", "slurmJobId"] == list(items[0])

    def test_table(self, two: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Go tabwriter's layout (min width 12, padding 3), runc's columns, then JOBID."""
        assert 0 == run(["--root", str(two), "list"])
        pid = str(os.getpid())
        w = len(CREATED) + 3
        assert ("ID          PID         STATUS      BUNDLE      "
                f"{'CREATED'.ljust(w)}OWNER       JOBID\n"
                f"c1          {pid.ljust(12)}running     /b/c1       "
                f"{CREATED.ljust(w)}tuser       41\n"
                f"c2          0           stopped     /b/c2       "
                f"{CREATED.ljust(w)}tuser       42\n") == capsys.readouterr().out

    def test_quiet(self, two: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == run(["--root", str(two), "list", "-q"])
        assert "c1\nc2\n" == capsys.readouterr().out

    @pytest.mark.parametrize("fmt", ["table", "json"])
    def test_empty_and_missing_root(self, tmp_path: Path, fmt: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
        """No containers: the header alone, or runc's `null`; a missing root is empty."""
        for root in (tmp_path / "none", tmp_path):
            assert 0 == run(["--root", str(root), "list", "-f", fmt])
            out = capsys.readouterr().out
            assert ("null\n" if fmt == "json" else
                    "ID          PID         STATUS      BUNDLE      CREATED     OWNER"
                    "       JOBID\n") == out

    def test_refused_entries_left_out(self, two: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
        """A symlink, a file, a directory others can write, one without or with a corrupt
        record, and a name that is no id are not listed; the rest still are."""
        (two / "link").symlink_to(two / "c1")
        (two / "file").write_text("x")
        (two / "empty").mkdir(mode=0o700)
        (two / "open").mkdir(mode=0o700)
        (two / "open").chmod(0o777)
        (two / "bad").mkdir(mode=0o700)
        (two / "bad" / "state.json").write_text("{")
        (two / "not an id").mkdir(mode=0o700)
        assert 0 == run(["--root", str(two), "list", "-q"])
        assert "c1\nc2\n" == capsys.readouterr().out

    def test_root_of_other_users_refused(self, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
        """The root itself goes through handle.open_root: writable by others → refused."""
        root = tmp_path / "r"
        root.mkdir(mode=0o700)
        root.chmod(0o777)
        assert 1 == run(["--root", str(root), "list"])
        assert "writable by other users" in capsys.readouterr().err

    def test_table_widens_to_longest(self) -> None:
        item = {"id": "x" * 20, "pid": 1, "status": "created", "bundle": "/b",
                "created": "t", "owner": "o", "slurmJobId": 7}
        lines = list_verb.table([item]).splitlines()
        assert lines[0].startswith("ID" + " " * 21 + "PID")
        assert lines[1].startswith("x" * 20 + "   1 ")


RUNC = shutil.which("runc")


class TestSpec:
    @pytest.mark.parametrize("rootless", [False, True])
    def test_written_as_runc(self, tmp_path: Path, rootless: bool) -> None:
        """runc's document, tab-indented, without a trailing newline, 0666 less umask."""
        assert 0 == run(["spec", "--bundle", str(tmp_path), *(["--rootless"] * rootless)])
        text = (tmp_path / "config.json").read_text()
        assert text == json.dumps(json.loads(text), indent="\t")
        assert not text.endswith("\n")
        umask = os.umask(0)
        os.umask(umask)
        assert 0o666 & ~umask == (tmp_path / "config.json").stat().st_mode & 0o777
        doc = json.loads(text)
        assert ("sh", "rootfs") == (doc["process"]["args"][0], doc["root"]["path"])
        namespaces = [n["type"] for n in doc["linux"]["namespaces"]]
        if rootless:
            assert ["pid", "ipc", "uts", "mount", "user"] == namespaces
            assert [{"containerID": 0, "hostID": os.geteuid(), "size": 1}] == \
                doc["linux"]["uidMappings"]
            assert "resources" not in doc["linux"]
        else:
            assert ["pid", "network", "ipc", "uts", "mount"] == namespaces

    def test_global_rootless_before_spec(self, tmp_path: Path) -> None:
        """The global --rootless (no value) before `spec` is not spec's flag."""
        assert 0 == run(["--rootless", "spec", "-b", str(tmp_path)])
        doc = json.loads((tmp_path / "config.json").read_text())
        assert "uidMappings" not in doc["linux"]

    def test_current_directory(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(tmp_path)
        assert 0 == run(["spec"])
        assert (tmp_path / "config.json").is_file()

    def test_refuses_existing(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """runc's words; the existing file (or a symlink there) is left as it was."""
        (tmp_path / "config.json").write_text("mine")
        assert 1 == run(["spec", "-b", str(tmp_path)])
        assert "scrun-py: File config.json exists. Remove it first\n" == \
            capsys.readouterr().err
        assert "mine" == (tmp_path / "config.json").read_text()
        (tmp_path / "config.json").unlink()
        (tmp_path / "config.json").symlink_to(tmp_path / "elsewhere")
        assert 1 == run(["spec", "-b", str(tmp_path)])
        assert not (tmp_path / "elsewhere").exists()

    def test_missing_bundle(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert 1 == run(["spec", "-b", str(tmp_path / "none")])
        assert (f"scrun-py: chdir {tmp_path / 'none'}: no such file or directory\n"
                == capsys.readouterr().err)

    @pytest.mark.skipif(RUNC is None, reason="runc is not installed")
    @pytest.mark.parametrize("rootless", [False, True])
    def test_same_bytes_as_runc(self, tmp_path: Path, rootless: bool) -> None:
        """Byte for byte what this machine's runc writes."""
        ours, theirs = tmp_path / "ours", tmp_path / "theirs"
        ours.mkdir()
        theirs.mkdir()
        extra = ["--rootless"] if rootless else []
        subprocess.run([str(RUNC), "spec", *extra], cwd=theirs, check=True)
        spec_verb.write(str(ours), spec_verb.document(rootless=rootless))
        assert (theirs / "config.json").read_bytes() == (ours / "config.json").read_bytes()
