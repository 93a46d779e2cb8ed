"""The CLI Slurm backend against stand-in salloc/srun/squeue/scancel scripts that record
their argv: what it runs for each call, and how it reads the answers (22.05 and later)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import AllocationFailed, StepLaunchFailed
from scrun_py.base.threads import Cancel, Cancelled
from scrun_py.oci.bundle import bundle_rootfs_problem
from scrun_py.slurm import cli_backend
from scrun_py.slurm.argv import NODE_PATH_PROLOGUE
from scrun_py.slurm.backend import Allocation, AllocRequest, StepRequest
from scrun_py.slurm.cli_backend import CliSlurm

SALLOC = """#!/bin/sh
echo "salloc $*" >> "$LOG"
if [ -n "$SALLOC_FAIL" ]; then
  echo "salloc: error: spank: required plugin gate.so: init_post_opt() failed" >&2
  echo "salloc: error: Job submit/allocate failed: Invalid partition name specified" >&2
  exit 1
fi
echo "salloc: Granted job allocation 55" >&2
[ -n "$SALLOC_HANG" ] && exec sleep 30
while [ "$1" != "--" ]; do shift; done; shift
SLURM_JOB_ID=55 exec "$@"
"""
SRUN = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "slurm $VERSION"; exit 0; fi
echo "srun $*" >> "$LOG"
[ -n "$SRUN_STDERR" ] && printf '%s\n' "$SRUN_STDERR" >&2
exit "${SRUN_RC:-0}"
"""
SQUEUE = """#!/bin/sh
echo "squeue $*" >> "$LOG"
case "$*" in
  *--steps*) printf '55.0|scrun\\n55.1|scrun-signal\\n55.2|scrun\\n' ;;
  *%T*) echo "$JOB_STATE" ;;
  *%e*) echo "2026-12-01T10:00:00|1001|1002" ;;
esac
"""
SCANCEL = """#!/bin/sh
echo "scancel $*" >> "$LOG"
"""
KILL = "crun --root=/r kill -a %n.%u.%j.%s.%t"


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for name, text in (("salloc", SALLOC), ("srun", SRUN), ("squeue", SQUEUE),
                       ("scancel", SCANCEL)):
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(tmp_path / "log"))
    monkeypatch.setenv("VERSION", "22.05.8")
    monkeypatch.setenv("JOB_STATE", "RUNNING")
    for var in ("SALLOC_FAIL", "SALLOC_HANG", "SRUN_RC", "SRUN_STDERR"):
        monkeypatch.delenv(var, raising=False)
    return d


def logged(bin_dir: Path) -> list[str]:
    log = bin_dir.parent / "log"
    return log.read_text().splitlines() if log.exists() else []


def backend(bin_dir: Path, kill: str | None = KILL) -> CliSlurm:
    return CliSlurm(salloc=str(bin_dir / "salloc"), srun_path=str(bin_dir / "srun"),
                    runtime_kill=kill)


class TestAllocation:
    def test_allocate_release(self, bin_dir: Path) -> None:
        """The holder reports the job env, then exits with the code release sends."""
        def body() -> None:
            slurm = backend(bin_dir)
            seen: list[int] = []
            alloc = slurm.allocate(AllocRequest(["-p", "debug"], dict(os.environ), seen.append, 10),
                                   Cancel())
            assert (55, "55", True, [55]) == (alloc.job_id, alloc.env["SLURM_JOB_ID"],
                                              alloc.owned, seen)
            assert not slurm.revoked(alloc)
            slurm.release(alloc, 3, 10)
            slurm.wait_ended(alloc, Cancel())
            assert slurm.revoked(alloc)  # the holder has gone
            assert "salloc: Granted job allocation 55" in alloc.messages

        body()
        assert logged(bin_dir)[0].startswith("salloc --job-name=scrun -p debug -- /bin/sh -c")

    def test_failure_names_slurm_errors(self, bin_dir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SALLOC_FAIL", "1")
        with pytest.raises(AllocationFailed) as info:
            backend(bin_dir).allocate(AllocRequest([], dict(os.environ), lambda _j: None, 10),
                                      Cancel())
        assert ("job allocation failed: salloc: error: spank: required plugin gate.so: "
                "init_post_opt() failed; Job submit/allocate failed: Invalid partition name "
                "specified") == str(info.value)

    def test_timeout_cancels_the_job(self, bin_dir: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SALLOC_HANG", "1")
        with pytest.raises(AllocationFailed, match=r"not granted within 0.3s \(salloc: Granted"):
            backend(bin_dir).allocate(AllocRequest([], dict(os.environ), lambda _j: None, 0.3),
                                      Cancel())
        assert "scancel 55" == logged(bin_dir)[-1]

    def test_cancel_withdraws_the_request(self, bin_dir: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        """A stop request while the job is pending: salloc is stopped, its job cancelled."""
        monkeypatch.setenv("SALLOC_HANG", "1")
        cancel = Cancel()
        threading.Timer(0.3, cancel.set).start()
        with pytest.raises(Cancelled):
            backend(bin_dir).allocate(AllocRequest([], dict(os.environ), lambda _j: None, None),
                                      cancel)
        assert "scancel 55" == logged(bin_dir)[-1]

    def test_missing_salloc(self, tmp_path: Path) -> None:
        with pytest.raises(AllocationFailed, match="cannot run salloc"):
            CliSlurm(salloc=str(tmp_path / "nope")).allocate(
                AllocRequest([], {}, lambda _j: None, 1), Cancel())

    @pytest.mark.parametrize(("state", "ok"), [("RUNNING", True), ("PENDING", False)])
    def test_attach(self, bin_dir: Path, monkeypatch: pytest.MonkeyPatch, state: str,
                    ok: bool) -> None:
        monkeypatch.setenv("JOB_STATE", state)
        slurm = backend(bin_dir)
        if ok:
            assert not slurm.attach(12, {"SLURM_JOB_ID": "12"}).owned
        else:
            with pytest.raises(AllocationFailed, match=r"SLURM_JOB_ID=12 is not a running "
                                                       r"job \(PENDING\)"):
                slurm.attach(12, {"SLURM_JOB_ID": "12"})

    def test_job_info(self, bin_dir: Path) -> None:
        info = backend(bin_dir).job_info(55)
        assert info is not None
        assert (1001, 1002) == (info.uid, info.gid)
        assert info.end_time is not None


class TestStep:
    @pytest.mark.parametrize(("version", "flag"), [("22.05.8", False), ("23.02.7", True),
                                                   ("24.11.1", True), ("25.05.0", True)])
    def test_container_id_from_23_02(self, bin_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                     version: str, flag: bool) -> None:
        monkeypatch.setenv("VERSION", version)
        req = StepRequest(job_id=55, container_id="c1", bundle="/b", args=["true"],
                          env=dict(os.environ), stdio=(0, 1, 2))

        def body() -> None:
            step = backend(bin_dir).launch_step(req)
            assert (0, None, False) == step.wait()

        body()
        line = logged(bin_dir)[-1]
        assert line.startswith("srun --jobid=55 --job-name=scrun --no-kill --quiet")
        assert flag == ("--container-id=c1" in line)

    @pytest.mark.parametrize(("version", "refused"), [("22.05.8", True), ("23.02.7", False),
                                                      ("24.11.1", False)])
    def test_root_path_other_than_rootfs(self, bin_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                         version: str, refused: bool) -> None:
        """22.05's slurmstepd runs BUNDLE/rootfs whatever root.path says: a bundle whose
        root.path is another directory is refused before srun runs; later releases run it."""
        monkeypatch.setenv("VERSION", version)
        bundle = bin_dir.parent / "bundle"
        (bundle / "rootfs").mkdir(parents=True)
        (bundle / "config.json").write_text('{"root": {"path": "."}}')
        req = StepRequest(job_id=55, container_id="c1", bundle=str(bundle), args=["true"],
                          env=dict(os.environ), stdio=(0, 1, 2),
                          rootfs_problem=bundle_rootfs_problem)
        if refused:
            with pytest.raises(StepLaunchFailed) as info:
                backend(bin_dir).launch_step(req)
            assert (f"bundle {bundle}: Slurm 22.05 runs the container from {bundle}/rootfs, "
                    "not from root.path '.'") == str(info.value)
            assert not [line for line in logged(bin_dir) if line.startswith("srun --jobid")]
        else:
            assert (0, None, False) == backend(bin_dir).launch_step(req).wait()

    @pytest.mark.parametrize(("line", "rc", "outcome", "passed_on"), [
        ("srun: error: Unable to create step for job 55: Connection refused", 1,
         (1, "Connection refused", True), True),
        ("srun: error: Unable to create step for job 55: Invalid partition", 1,
         (1, "Invalid partition", False), True),
        ("srun: error: node1: task 0: Exited with exit code 3", 3, (3, None, False), False),
        ("an error of the container's", 2, (2, None, False), True),
    ])
    def test_outcome_and_stderr(self, bin_dir: Path, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, line: str, rc: int,
                                outcome: tuple[int, str | None, bool], passed_on: bool) -> None:
        """Step.wait() says whether Slurm never created the step (and whether trying
        again may work); srun's exit report is kept off the container's stderr."""
        monkeypatch.setenv("SRUN_STDERR", line)
        monkeypatch.setenv("SRUN_RC", str(rc))
        with open(tmp_path / "stderr", "w+b") as err:
            req = StepRequest(job_id=55, container_id="c1", bundle="/b", args=["true"],
                              env=dict(os.environ), stdio=(0, 1, err.fileno()))
            assert outcome == tuple(backend(bin_dir).launch_step(req).wait() or ())
        assert (line + "\n" if passed_on else "") == (tmp_path / "stderr").read_text()

    def test_launch_fails(self, tmp_path: Path) -> None:
        req = StepRequest(job_id=1, container_id="c1", bundle="/b", args=["true"], env={})
        with pytest.raises(StepLaunchFailed, match="cannot run"):
            CliSlurm(srun_path=str(tmp_path / "nope")).launch_step(req)

    def test_step_id_and_signal_through_the_runtime(self, bin_dir: Path) -> None:
        """The newest `scrun` step; the signal runs RunTimeKill without -a in a helper step."""
        def body() -> None:
            slurm = backend(bin_dir)
            assert 2 == slurm.step_id(55, lambda: True)
            slurm.signal(55, 2, 10, dict(os.environ), lambda: True)

        body()
        assert logged(bin_dir)[-1].startswith(
            "srun --jobid=55 --job-name=scrun-signal --no-kill --quiet --ntasks-per-node=1 "
            f"--overlap -- /bin/sh -c {NODE_PATH_PROLOGUE}d=")
        assert ' crun --root=/r kill "${SLURMD_NODENAME}"."$(id -un)".55.2."$t" 10 && ' \
            in logged(bin_dir)[-1]

    def test_signal_without_runtime_kill_uses_scancel(self, bin_dir: Path) -> None:
        backend(bin_dir, kill=None).signal(55, 2, 15, {}, lambda: True)
        assert ["scancel --signal=15 55.2"] == logged(bin_dir)

    def test_runtime_kill_retried_then_scancel(self, bin_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
        """Right after start the runtime may not know the container yet: retried while
        the step lives, then scancel --signal; a step that has gone needs nothing more."""
        monkeypatch.setenv("SRUN_RC", "1")
        monkeypatch.setattr(cli_backend, "RUNTIME_SIGNAL_ATTEMPTS", 3)
        backend(bin_dir).signal(55, 2, 10, dict(os.environ), lambda: True)
        assert 3 == sum(ln.startswith("srun") for ln in logged(bin_dir))
        assert "scancel --signal=10 55.2" == logged(bin_dir)[-1]
        backend(bin_dir).signal(55, 2, 9, dict(os.environ), lambda: False)
        assert logged(bin_dir)[-1].startswith("srun")

    def test_a_retry_signals_only_the_containers_that_missed_it(
            self, bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A helper step that fails on one node (its container not there yet) is retried,
        and the retry skips the containers that took the signal: none gets it twice (a
        second TERM would run the container's trap twice)."""
        (bin_dir / "srun").write_text(
            '#!/bin/sh\nwhile [ "$1" != "-c" ]; do shift; done\nrc=0\n'
            'for n in n1 n2 n3; do SLURMD_NODENAME=$n /bin/sh -c "$2" || rc=1; done\n'
            'exit $rc\n')
        # n2's container appears only at the third attempt
        (bin_dir / "crun").write_text(
            '#!/bin/sh\nid=$(eval echo "\\$$(($#-1))")\n'
            'case "$id" in n2.*) echo x >> "$LOG.n2"; '
            '[ "$(wc -l < "$LOG.n2")" -ge 3 ] || exit 1;; esac\n'
            'echo "signalled $id" >> "$LOG"\n')
        (bin_dir / "crun").chmod(0o755)
        env = {**os.environ, "SLURM_TASKS_PER_NODE": "2(x3)"}
        backend(bin_dir, kill=f"{bin_dir}/crun kill %n.%t").signal(55, 2, 15, env,
                                                                   lambda: True)
        assert sorted(f"signalled {n}.{t}" for n in ("n1", "n2", "n3") for t in (0, 1)) \
            == sorted(logged(bin_dir))
        assert 4 == len((bin_dir.parent / "log.n2").read_text().splitlines())

    def test_helper_steps_run_without_the_jobs_task_count(
            self, bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """srun takes SLURM_NTASKS/SLURM_NPROCS as --ntasks: in a job of two tasks per node
        it would run a helper step's command twice on each node (each container would
        get the signal twice).  The helper step's srun never sees them."""
        (bin_dir / "srun").write_text(
            '#!/bin/sh\nenv | grep -E "^SLURM_(NTASKS|NPROCS|JOB_ID)=" | sort >> "$LOG"\n')
        env = {**os.environ, "SLURM_NTASKS": "6", "SLURM_NPROCS": "6", "SLURM_JOB_ID": "55",
               "SLURM_TASKS_PER_NODE": "2(x3)"}
        backend(bin_dir).signal(55, 2, 15, env, lambda: True)
        assert ["SLURM_JOB_ID=55"] == logged(bin_dir)

    def test_kill_and_command_argv(self, bin_dir: Path) -> None:
        slurm = backend(bin_dir)
        kill = slurm.kill_argv(55, 2)
        assert kill is not None
        assert kill[-1].endswith(" 9")
        assert backend(bin_dir, kill="crun kill %x").kill_argv(55, 2) is None
        assert ["/bin/sh", "-c", f"{NODE_PATH_PROLOGUE}hostname"] == slurm.command_argv(
            55, "hostname")[-3:]
        assert [procs.resolve_program("env", os.environ), "-u", "SLURM_NTASKS", "-u",
                "SLURM_NPROCS", str(bin_dir / "srun")] == slurm.command_argv(55, "x")[:6]

    def test_abandon_script(self, bin_dir: Path) -> None:
        """The kill command under a 30 s timeout (by its absolute path), for the most
        tasks a node of the allocation has (SLURM_TASKS_PER_NODE); None where the kill
        cannot be built."""
        import shlex

        alloc = Allocation(55, {"SLURM_TASKS_PER_NODE": "1,3(x2)"}, True)
        kill = backend(bin_dir).kill_argv(55, 2, 3)
        assert kill is not None
        timeout = procs.resolve_program("timeout", os.environ)
        assert f"{timeout} 30 {shlex.join(kill)}\n" == backend(bin_dir).abandon_script(
            alloc, 2)
        assert kill != backend(bin_dir).kill_argv(55, 2, 1)
        assert backend(bin_dir, kill="crun kill %x").abandon_script(alloc, 2) is None

    def test_cancel(self, bin_dir: Path) -> None:
        backend(bin_dir).cancel(55, 0)
        assert "scancel 55.0" == logged(bin_dir)[-1]

