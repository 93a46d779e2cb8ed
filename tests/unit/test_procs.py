"""The one home of process helpers: exit codes, names, /proc, running a command."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.base import procs


class TestProcs:
    @pytest.mark.parametrize(("rc", "code"), [(0, 0), (3, 3), (-9, 137), (-15, 143), (256, 0)])
    def test_exit_code(self, rc: int, code: int) -> None:
        assert code == procs.exit_code(rc)

    def test_names(self) -> None:
        assert "root" == procs.user_name(0)
        assert "root" == procs.group_name(0)
        assert "4000000" == procs.user_name(4000000)
        assert "4000000" == procs.group_name(4000000)

    def test_proc_reads(self) -> None:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert child.pid in procs.descendants(os.getpid())
            assert procs.process_start_time(child.pid).isdigit()
            assert procs.comm(child.pid).startswith("python")
        finally:
            child.kill()
            child.wait()
        assert "" == procs.process_start_time(child.pid)
        assert "" == procs.comm(child.pid)
        assert isinstance(procs.in_user_namespace(), bool)
        assert procs.ns_root_host_id("uid") >= 0

    def test_run(self) -> None:
        res = procs.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (3, "out\nerr\n", False) == (res.status, res.text, res.timed_out)
        assert "in" == procs.run(["cat"], stdin=b"in").text
        missing = procs.run(["/nonexistent/cmd"])
        assert (127, "No such file or directory") == (missing.status, missing.error)
        slow = procs.run(["sleep", "10"], timeout_s=0.1)
        assert (124, True) == (slow.status, slow.timed_out)

    def test_run_apart(self) -> None:
        """With `apart`, stdout alone in `output` and stderr in `stderr` (slurm/runner.py
        reads squeue's and ps's step's stdout so)."""
        res = procs.run(["sh", "-c", "echo out; echo err >&2; exit 3"], apart=True)
        assert (3, b"out\n", b"err\n") == (res.status, res.output, res.stderr)
        slow = procs.run(["sh", "-c", "echo e >&2; exec sleep 10"], timeout_s=0.3, apart=True)
        assert (124, b"e\n") == (slow.status, slow.stderr)

    def test_run_killed_by_a_signal(self) -> None:
        assert 143 == procs.run(["sh", "-c", "kill -TERM $$"]).status


class TestWaitChild:
    """procs.wait_child: Popen.wait(timeout) without its doubling sleeps."""

    def test_returns_the_exit_status(self) -> None:
        child = subprocess.Popen(["sh", "-c", "exit 7"])
        assert 7 == procs.wait_child(child, 10.0)
        assert 7 == child.returncode  # reaped through Popen: it knows the status

    def test_death_by_signal_is_negative_as_popen_says(self) -> None:
        child = subprocess.Popen(["sh", "-c", "kill -TERM $$"])
        assert -15 == procs.wait_child(child, 10.0)

    def test_timeout_returns_none_and_leaves_the_child(self) -> None:
        child = subprocess.Popen(["sleep", "30"])
        try:
            assert procs.wait_child(child, 0.05) is None
            assert child.poll() is None
        finally:
            child.kill()
            child.wait()

    def test_no_timeout_waits_for_the_exit(self) -> None:
        child = subprocess.Popen(["sh", "-c", "sleep 0.1; exit 3"])
        assert 3 == procs.wait_child(child, None)

    def test_child_reaped_before_by_another_waiter(self) -> None:
        child = subprocess.Popen(["sh", "-c", "exit 4"])
        child.wait()
        assert 4 == procs.wait_child(child, 1.0)

    def test_exit_noticed_while_another_thread_waits_too(self) -> None:
        """The holder is waited for by the job watch and by the release at once."""
        import threading

        child = subprocess.Popen(["sh", "-c", "sleep 0.2; exit 5"])
        seen: list[int | None] = []
        other = threading.Thread(target=lambda: seen.append(procs.wait_child(child, 10.0)))
        other.start()
        assert 5 == procs.wait_child(child, 10.0)
        other.join(10)
        assert [5] == seen


class TestSpawn:
    """procs.spawn: salloc's start without subprocess (pipes, session, PATH, cwd)."""

    def setup_method(self) -> None:
        self.children: list[procs.Spawned] = []

    def teardown_method(self) -> None:
        for child in self.children:
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
            if child.poll() is None:
                child.kill()
                child.wait()

    def _spawn(self, tmp_path: Path, argv: list[str], env: dict[str, str] | None = None,
               cwd: str | None = None) -> tuple[procs.Spawned, Path]:
        err = tmp_path / "stderr"
        with open(err, "wb") as fh:
            child = procs.spawn(argv, env if env is not None else dict(os.environ),
                                stderr=fh.fileno(), cwd=cwd)
        self.children.append(child)
        return child, err

    def test_pipes_and_status(self, tmp_path: Path) -> None:
        child, err = self._spawn(
            tmp_path, ["sh", "-c", "read x; echo got $x; echo oops >&2; exit 3"])
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(b"hello\n")
        child.stdin.close()
        assert b"got hello\n" == child.stdout.read()
        assert 3 == child.wait()
        assert 3 == child.poll() == child.returncode
        assert b"oops\n" == err.read_bytes()

    def test_a_session_of_its_own(self, tmp_path: Path) -> None:
        child, _ = self._spawn(tmp_path, ["sleep", "30"])
        try:
            assert child.pid == os.getsid(child.pid)
            assert child.poll() is None
        finally:
            child.kill()
        assert -9 == child.wait()
        child.send_signal(15)  # gone: nothing to signal, no error

    def test_bare_name_found_on_the_given_path(self, tmp_path: Path) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        tool = bin_dir / "only-here"
        tool.write_text("#!/bin/sh\necho found\n")
        tool.chmod(0o755)
        child, _ = self._spawn(tmp_path, ["only-here"], env={"PATH": f"/nonexistent:{bin_dir}"})
        assert child.stdout is not None
        assert b"found\n" == child.stdout.read()
        assert 0 == child.wait()

    def test_missing_program(self, tmp_path: Path) -> None:
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(FileNotFoundError):
            self._spawn(tmp_path, ["no-such-program-here"], env={"PATH": str(tmp_path)})
        assert before == len(os.listdir("/proc/self/fd"))  # its pipes closed again

    def test_cwd(self, tmp_path: Path) -> None:
        child, _ = self._spawn(tmp_path, ["pwd"], cwd=str(tmp_path))
        assert child.stdout is not None
        assert f"{tmp_path}\n".encode() == child.stdout.read()
        assert 0 == child.wait()

    def test_sigpipe_is_not_left_ignored(self, tmp_path: Path) -> None:
        """The interpreter ignores SIGPIPE; the child gets the default back."""
        child, _ = self._spawn(tmp_path, ["cat", "/proc/self/status"])
        assert child.stdout is not None
        status = child.stdout.read().decode()
        child.wait()
        ignored = int(next(line.split()[1] for line in status.splitlines()
                           if line.startswith("SigIgn:")), 16)
        assert 0 == ignored & (1 << (13 - 1))  # SIGPIPE

    def test_wait_child_on_a_spawned_child(self, tmp_path: Path) -> None:
        child, _ = self._spawn(tmp_path, ["sh", "-c", "exit 6"])
        assert 6 == procs.wait_child(child, 10.0)


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


class TestProgramsFoundOnlyInAbsolutePathEntries:
    """A Slurm program is found before its working directory (which an image chooses) is
    entered, in PATH's absolute entries only: an empty or relative entry never runs a
    file of the working directory."""

    @pytest.fixture
    def layout(self, tmp_path: Path) -> tuple[Path, Path, Path]:
        """(the real program's directory, the working directory, the marker file): the
        working directory holds a `salloc`, and ./rel/salloc, that write the marker."""
        marker = tmp_path / "marker"
        work = tmp_path / "work"
        for planted in (work / "salloc", work / "rel" / "salloc", work / "srun"):
            _script(planted, f"echo planted > {marker}")
        real = tmp_path / "bin"
        _script(real / "salloc", "echo real")
        return real, work, marker

    def _spawn(self, argv: list[str], env: dict[str, str], tmp_path: Path,
               cwd: str | None) -> procs.Spawned:
        with open(tmp_path / "stderr", "wb") as err:
            return procs.spawn(argv, env, stderr=err.fileno(), cwd=cwd)

    @pytest.mark.parametrize("through", ["cwd", "chdir"])
    def test_empty_and_relative_entries_are_skipped(
            self, layout: tuple[Path, Path, Path], tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch, through: str) -> None:
        real, work, marker = layout
        if through == "chdir":
            monkeypatch.chdir(work)
        child = self._spawn(["salloc"], {"PATH": f"::.:rel:{real}"}, tmp_path,
                            str(work) if through == "cwd" else None)
        assert child.stdout is not None and child.stdin is not None
        assert b"real\n" == child.stdout.read()
        assert 0 == child.wait()
        child.stdout.close()
        child.stdin.close()
        assert not marker.exists()

    def test_found_only_in_a_relative_entry_is_not_found(
            self, layout: tuple[Path, Path, Path], tmp_path: Path) -> None:
        _, work, marker = layout
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(FileNotFoundError,
                           match=r"not found on PATH \(relative PATH entries are ignored\)") as exc:
            self._spawn(["salloc"], {"PATH": ":rel:."}, tmp_path, str(work))
        assert "salloc" == exc.value.filename
        assert before == len(os.listdir("/proc/self/fd"))
        assert not marker.exists()

    @pytest.mark.parametrize("name", ["./salloc", "rel/salloc"])
    def test_a_relative_name_with_a_slash_is_refused(
            self, layout: tuple[Path, Path, Path], tmp_path: Path, name: str) -> None:
        real, work, marker = layout
        with pytest.raises(FileNotFoundError, match="relative program path refused"):
            self._spawn([name], {"PATH": str(real)}, tmp_path, str(work))
        assert not marker.exists()

    def test_resolved_path_is_absolute(self, layout: tuple[Path, Path, Path],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        real, work, _ = layout
        monkeypatch.chdir(work)
        (work / "notexec").mkdir()
        (work / "notexec" / "salloc").write_text("not executable")
        (work / "adir" / "salloc").mkdir(parents=True)
        path = procs.resolve_program(
            "salloc", {"PATH": f":.:{work / 'notexec'}:{work / 'adir'}:{real}"})
        assert str(real / "salloc") == path
        assert os.path.isabs(path)
        assert str(real / "salloc") == procs.resolve_program(str(real / "salloc"), {})

    def test_only_unexecutable_candidates(self, tmp_path: Path) -> None:
        (tmp_path / "salloc").write_text("not executable")
        with pytest.raises(PermissionError):
            procs.resolve_program("salloc", {"PATH": str(tmp_path)})
        with pytest.raises(PermissionError):
            procs.resolve_program(str(tmp_path / "salloc"), {})
        with pytest.raises(FileNotFoundError, match="No such file"):
            procs.resolve_program(str(tmp_path / "nope"), {})

    def test_salloc_holder_reports_a_salloc_not_found(
            self, layout: tuple[Path, Path, Path]) -> None:
        """The allocation fails as for a missing salloc; the planted one never runs."""
        from scrun_py.base.errors import AllocationFailed
        from scrun_py.base.threads import Cancel
        from scrun_py.slurm.backend import AllocRequest
        from scrun_py.slurm.salloc_holder import SallocHolder

        _, work, marker = layout
        holder = SallocHolder("salloc", lambda _job: None)
        with pytest.raises(AllocationFailed, match="cannot run salloc: not found on PATH"):
            holder.allocate(AllocRequest([f"--chdir={work}"], {"PATH": ":rel:."},
                                         lambda _j: None, 5.0), Cancel())
        assert str(work) == holder.job_dir
        assert not marker.exists()

    @pytest.mark.parametrize("through", ["job_dir", "chdir"])
    def test_srun_of_the_container_step(self, layout: tuple[Path, Path, Path],
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        through: str) -> None:
        """srun is started with Popen(cwd=…): it is found before, the planted one never
        runs; when srun is nowhere else, the launch fails as for a missing srun."""
        from scrun_py.base.errors import StepLaunchFailed
        from scrun_py.slurm.backend import StepRequest
        from scrun_py.slurm.cli_backend import CliSlurm

        real, work, marker = layout
        _script(real / "srun", f"echo real-srun > {tmp_path / 'ran'}")
        if through == "chdir":
            monkeypatch.chdir(work)
        slurm = CliSlurm(srun_path="srun", version_probe=lambda: (23, 2))
        if through == "job_dir":
            slurm._jobs.job_dir = str(work)
        with open(tmp_path / "out", "w+b") as out:
            req = StepRequest(job_id=1, container_id="c1", bundle="/b", args=["true"],
                              env={"PATH": f"::.:{real}"},
                              stdio=(out.fileno(), out.fileno(), out.fileno()))
            step = slurm.launch_step(req)
            step.wait(10.0)
            assert "real-srun\n" == (tmp_path / "ran").read_text()
            req.env["PATH"] = ":."
            with pytest.raises(StepLaunchFailed,
                               match="cannot run srun: not found on PATH"):
                slurm.launch_step(req)
        assert not marker.exists()
