"""`ps`: the helper step it runs (a stand-in srun on PATH) and what it prints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scrun_py.commands import ps
from scrun_py.container import spool
from scrun_py.container.record import ContainerRecord
from scrun_py.slurm import node_step
from scrun_py.slurm.argv import NODE_PATH_PROLOGUE
from tests.unit.cli_run import run

KILL = "crun --rootless=true --root=/tmp/ocistate-%u kill %n.%u.%j.%s.%t"
OCI_CONF = f'''RunTimeQuery="crun --rootless=true --root=/tmp/ocistate-%u state %n.%u.%j.%s.%t"
RunTimeKill="{KILL}"
RunTimeDelete="crun --rootless=true --root=/tmp/ocistate-%u delete --force %n.%u.%j.%s.%t"
RunTimeRun="exec crun --rootless=true --root=/tmp/ocistate-%u run --bundle %b %n.%u.%j.%s.%t"
'''


class World:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = tmp_path / "root"
        self.root.mkdir(mode=0o700)
        etc = tmp_path / "etc"
        etc.mkdir()
        self.slurm_conf = etc / "slurm.conf"
        self.slurm_conf.write_text("ClusterName=x\n")
        self.oci_conf = etc / "oci.conf"
        self.oci_conf.write_text(OCI_CONF)
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "calls"
        self.srun("echo '[101,102]'")
        monkeypatch.setenv("PATH", f"{self.bin}:{os.environ['PATH']}")
        monkeypatch.setenv("SLURM_CONF", str(self.slurm_conf))
        # the stand-in's pids are not processes of a job here: TestOfJobHere checks that
        monkeypatch.setattr(ps, "of_job_here", lambda found, job_id: found)

    def srun(self, body: str) -> None:
        """The stand-in srun: records its arguments (NUL-separated) and its SLURM_CONF,
        then runs `body`."""
        script = self.bin / "srun"
        script.write_text("#!/bin/sh\n"
                          f"printf '%s\\0' \"$@\" > {self.calls}\n"
                          f"echo \"$SLURM_CONF\" > {self.calls}.conf\n"
                          f"{body}\n")
        script.chmod(0o755)

    def argv(self) -> list[str]:
        return self.calls.read_bytes().decode().split("\0")[:-1]

    def container(self, status: str = "running", step_id: int | None = 3) -> None:
        spool.make_container_dir(self.root, "c1")
        spool.save_record(self.root, ContainerRecord(
            id="c1", bundle="/b", rootfs="/b/rootfs", status=status,
            anchor_pid=os.getpid(), created="2024-01-02T03:04:05Z", owner="u", job_id=42,
            step_id=step_id))

    def ps(self, *args: str) -> int:
        return run(["--root", str(self.root), "ps", *args])


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(tmp_path, monkeypatch)


class TestPs:
    def test_json_and_step(self, world: World, capsys: pytest.CaptureFixture[str]) -> None:
        """runc's JSON array of pids; one helper task beside the container's step, its
        command the node runtime's `ps` on the container's id on the node."""
        world.container()
        assert 0 == world.ps("--format", "json", "c1")
        assert ("[101,102]\n", "") == capsys.readouterr()
        argv = world.argv()
        assert ["--jobid=42", "--job-name=scrun-ps", "--overlap", "--quiet",
                "--nodes=1", "--ntasks=1", "--relative=0", "--", "/bin/sh", "-c"] == argv[:-1]
        assert argv[-1] == NODE_PATH_PROLOGUE + node_step._PS_SCRIPT.format(ps=
            'crun --rootless=true --root=/tmp/ocistate-"$(id -un)" ps --format json '
            '"${SLURMD_NODENAME}"."$(id -un)".42.3.0',
            state='crun --rootless=true --root=/tmp/ocistate-"$(id -un)" state '
            '"${SLURMD_NODENAME}"."$(id -un)".42.3.0', tenths=node_step.NODE_WAIT_TENTHS)
        assert str(world.slurm_conf) + "\n" == Path(f"{world.calls}.conf").read_text()

    def test_table(self, world: World, capsys: pytest.CaptureFixture[str]) -> None:
        world.container()
        assert 0 == world.ps("c1")
        assert "PID\n101\n102\n" == capsys.readouterr().out

    def test_step_id_from_squeue(self, world: World,
                                 capsys: pytest.CaptureFixture[str]) -> None:
        """A record without the step's id: squeue's container step (named scrun)."""
        squeue = world.bin / "squeue"
        squeue.write_text("#!/bin/sh\necho '42.0|lua-command'\necho '42.5|scrun'\n")
        squeue.chmod(0o755)
        world.container(step_id=None)
        assert 0 == world.ps("-f", "json", "c1")
        assert ".42.5.0" in world.argv()[-1]

    def test_node_error_is_the_runtimes(self, world: World,
                                        capsys: pytest.CaptureFixture[str]) -> None:
        """The node runtime's JSON error message, not srun's task report."""
        world.srun("""echo '{"msg": "container `x` does not exist", "level": "error"}' >&2
echo 'srun: error: n1: task 0: Exited with exit code 1' >&2; exit 1""")
        world.container()
        assert 1 == world.ps("c1")
        assert "scrun-py: ps: container `x` does not exist\n" == capsys.readouterr().err

    @pytest.mark.parametrize("status", ["created", "stopped"])
    def test_not_running(self, world: World, status: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
        world.container(status=status)
        assert 1 == world.ps("c1")
        assert "scrun-py: container not running\n" == capsys.readouterr().err
        assert not world.calls.exists()

    def test_unknown(self, world: World, capsys: pytest.CaptureFixture[str]) -> None:
        assert 1 == world.ps("nope")
        assert "does not exist" in capsys.readouterr().err

    def test_runtime_kill_not_crun(self, world: World,
                                   capsys: pytest.CaptureFixture[str]) -> None:
        world.oci_conf.write_text(OCI_CONF.replace(KILL, "/usr/local/bin/mykill %n.%j"))
        world.container()
        assert 1 == world.ps("c1")
        assert ("scrun-py: ps: cannot derive the node's runtime command from oci.conf's "
                "RunTimeKill: RunTimeKill does not run crun or runc\n"
                == capsys.readouterr().err)


class TestParse:
    @pytest.mark.parametrize(("text", "pids"), [
        ("[1,2]", [1, 2]), ("null", []), ("", []), ('[{"pid": 5}, {"pid": "x"}]', [5]),
        ("[true, 3]", [3]),
    ])
    def test_pids(self, text: str, pids: list[int]) -> None:
        assert pids == node_step.parse_pids(text)

    def test_not_json(self) -> None:
        with pytest.raises(Exception, match="printed no JSON"):
            node_step.parse_pids("PID\n1\n")

    def test_render(self) -> None:
        assert "[]\n" == ps.render([], "json")
        assert json.loads(ps.render([3, 4], "json")) == [3, 4]


class TestOfJobHere:
    """ps prints a node pid only when the process with that pid here descends from a
    slurmstepd of the container's job: never another login-node process."""

    @staticmethod
    def _proc(tmp_path: Path, table: dict[int, tuple[int, bytes]]) -> str:
        for pid, (ppid, cmdline) in table.items():
            (tmp_path / str(pid)).mkdir()
            (tmp_path / str(pid) / "stat").write_bytes(
                f"{pid} (x) S {ppid} 0 0".encode())
            (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)
        return str(tmp_path)

    def test_only_the_jobs_descendants(self, tmp_path: Path) -> None:
        proc = self._proc(tmp_path, {
            10: (1, b"slurmstepd: [42.0]"), 11: (10, b"crun\0run"), 12: (11, b"sleep\0060"),
            20: (1, b"slurmstepd: [420.0]"), 21: (20, b"sleep"),  # job 420, not 42
            30: (1, b"sshd"), 31: (30, b"bash"),  # a login-node process
        })
        assert [12, 11] == ps.of_job_here([12, 11, 21, 31, 99], 42, proc)

    def test_none_here(self, tmp_path: Path) -> None:
        assert [] == ps.of_job_here([101, 102], 42, str(tmp_path))

    def test_a_loop_in_parents_ends(self, tmp_path: Path) -> None:
        proc = self._proc(tmp_path, {5: (6, b"a"), 6: (5, b"b")})
        assert [] == ps.of_job_here([5], 42, proc)
