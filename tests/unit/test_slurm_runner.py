"""slurm/runner.py: the one runner of Slurm's short commands."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import SlurmError
from scrun_py.slurm import runner


class TestRunner:
    def test_checked(self) -> None:
        """A command that ran is its Result, whatever its status; one that could not
        start or timed out is a SlurmError."""
        assert 3 == runner.checked(["sh", "-c", "exit 3"]).status
        with pytest.raises(SlurmError, match="cannot run /nonexistent/squeue"):
            runner.checked(["/nonexistent/squeue"])
        with pytest.raises(SlurmError, match=r"sleep timed out after 0\.2s"):
            runner.checked(["sleep", "10"], timeout_s=0.2)

    def test_stdout_of(self) -> None:
        """stdout alone of a command that succeeded; None otherwise."""
        env = dict(os.environ)
        assert "out\n" == runner.stdout_of(["sh", "-c", "echo out; echo err >&2"], env, 10)
        assert runner.stdout_of(["sh", "-c", "echo out; exit 1"], env, 10) is None
        assert runner.stdout_of(["/nonexistent/squeue"], env, 10) is None
        assert runner.stdout_of(["sleep", "10"], env, 0.2) is None


class TestStartDir:
    """Where Slurm's programs start: a directory the node can enter (slurmstepd enters
    srun's for every task; salloc's is the job's WorkDir)."""

    def test_working_dir_option(self, tmp_path: Path) -> None:
        assert str(tmp_path) == runner.start_dir([f"--chdir={tmp_path}", "-N1"])

    def test_callers_directory_kept(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    ) -> None:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(procs, "in_user_namespace", lambda: False)
        assert runner.start_dir(["-N1"]) is None

    def test_unusable_directory_becomes_tmp(self, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(os, "access", lambda path, mode: False)
        assert "/tmp" == runner.start_dir([])

    def test_an_engines_bundle_becomes_tmp(self, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        """An engine runs its runtime in the bundle it made (dockerd's containerd): a
        directory of the login node's own disk, which a compute node does not have."""
        (tmp_path / "config.json").write_text("{}")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(procs, "in_user_namespace", lambda: False)
        assert "/tmp" == runner.start_dir(["-N1"])
        assert str(tmp_path) == runner.start_dir([f"--chdir={tmp_path}"])

    def test_a_directory_in_an_engines_bundle_becomes_tmp(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """podman runs exec's runtime in the exec session's directory inside the
        container's bundle (its userdata, on the login node's own disk)."""
        (tmp_path / "config.json").write_text("{}")
        (tmp_path / "session").mkdir()
        monkeypatch.chdir(tmp_path / "session")
        monkeypatch.setattr(procs, "in_user_namespace", lambda: False)
        assert "/tmp" == runner.start_dir(["-N1"])

    def test_removed_directory_becomes_tmp(self, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        gone = tmp_path / "gone"
        gone.mkdir()
        monkeypatch.chdir(gone)
        gone.rmdir()
        assert "/tmp" == runner.start_dir([])

    def test_in_a_user_namespace_the_callers_directory_is_not_used(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A rootless engine's directory (rootlesskit's private /run) may not exist for
        slurmd: /tmp instead, unless the job options name one."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(procs, "in_user_namespace", lambda: True)
        assert "/tmp" == runner.start_dir(["-N1"])
        assert str(tmp_path) == runner.start_dir([f"--chdir={tmp_path}"])

    @pytest.mark.parametrize(("in_userns", "where"), [(False, "caller"), (True, "/tmp")])
    def test_short_commands_start_there(self, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch, in_userns: bool,
                                        where: str) -> None:
        """runner.run starts its command in start_dir (the srun of kill's RunTimeKill
        and of ps are among them)."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(procs, "in_user_namespace", lambda: in_userns)
        res = runner.run(["pwd"], env=dict(os.environ))
        assert (str(tmp_path) if where == "caller" else where) + "\n" == res.text

    @pytest.mark.parametrize(("in_userns", "where"), [(False, "caller"), (True, "/tmp")])
    def test_exec_step_starts_there(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capfd: pytest.CaptureFixture[str], in_userns: bool,
                                    where: str) -> None:
        """exec's srun (supervisor.supervise) starts in start_dir too."""
        from scrun_py.slurm import supervisor

        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(procs, "in_user_namespace", lambda: in_userns)
        out = tmp_path / "out"
        rc = supervisor.supervise([procs.resolve_program("sh", os.environ), "-c",
                                  f"pwd > {out}"], dict(os.environ))
        assert 0 == rc
        assert (str(tmp_path) if where == "caller" else where) + "\n" == out.read_text()
