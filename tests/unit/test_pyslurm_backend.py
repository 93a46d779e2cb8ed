"""The pyslurm backend and the backend choice without a cluster: pyslurm's API is a
stand-in module with the classes and attributes scrun-py uses (pyslurm 25.11's names);
the client commands are recorded, not run.  On the real cluster the same code runs
against pyslurm itself (tests/e2e/test_backend_contract.py)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import AllocationFailed, ConfigError
from scrun_py.slurm import choice, pyslurm_api
from scrun_py.slurm.cli_backend import CliSlurm
from scrun_py.slurm.pyslurm_api import PyslurmApi, RpcFailed
from scrun_py.slurm.pyslurm_backend import PyslurmSlurm

UNREACHABLE = 1007  # slurm_errno.h: SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR


class RPCError(Exception):
    def __init__(self, errno: int, msg: str) -> None:
        super().__init__(msg)
        self.errno, self.msg = errno, msg


class StandIn:
    """What slurmctld knows, behind pyslurm's names (Job, JobStep, slurmctld.Config)."""

    def __init__(self) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.down = False  # every RPC fails as if slurmctld did not answer
        self.ctld_version = "25.11.7"

    def _rpc(self, *call: Any) -> None:
        self.calls.append(call)
        if self.down:
            raise RPCError(UNREACHABLE, "Unable to contact slurm controller (connect failure)")

    def module(self) -> ModuleType:
        world = self

        class Job:
            def __init__(self, job_id: int) -> None:
                self.id = job_id

            @staticmethod
            def load(job_id: int) -> SimpleNamespace:
                world._rpc("load_job", job_id)
                if job_id not in world.jobs:
                    raise RPCError(pyslurm_api.INVALID_JOB_ID, "Invalid job id specified")
                return SimpleNamespace(**world.jobs[job_id])

            def cancel(self) -> None:
                world._rpc("kill_job", self.id, 9)
                if self.id not in world.jobs:
                    raise RPCError(pyslurm_api.INVALID_JOB_ID, "Invalid job id specified")
                world.jobs[self.id]["state"] = "CANCELLED"

        class JobStep:
            """Only JobStep.load: scrun-py never signals a JobStep made from ids."""

            def __init__(self, job_id: int, step_id: int) -> None:
                self.key = (job_id, step_id)

            @staticmethod
            def load(job_id: int, step_id: int) -> JobStep:
                world._rpc("load_step", job_id, step_id)
                if step_id not in world.jobs.get(job_id, {}).get("steps", {}):
                    raise RPCError(-1, f"Step {step_id} of Job {job_id} not found.")
                return JobStep(job_id, step_id)

            def cancel(self) -> None:
                world._rpc("kill_job_step", *self.key, 9)

            def send_signal(self, sig: int) -> None:
                world._rpc("signal_job_step", *self.key, sig)

        def load_conf() -> SimpleNamespace:
            world._rpc("load_ctl_conf")
            return SimpleNamespace(version=world.ctld_version)

        mod = ModuleType("pyslurm")
        mod.__dict__.update(__version__="25.11.2", RPCError=RPCError, Job=Job, JobStep=JobStep,
                            slurmctld=SimpleNamespace(Config=SimpleNamespace(load=load_conf)))
        return mod

    def add_job(self, job_id: int, state: str = "RUNNING", **fields: Any) -> None:
        self.jobs[job_id] = {"state": state, "end_time": 1_900_000_000, "user_id": 1001,
                             "group_id": 1002, "steps": {}, **fields}


class RecordingCli(CliSlurm):
    """The CLI backend with its commands recorded (and answered by nothing)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.ran: list[str] = []

    def _run(self, argv: Any, env: dict[str, str] | None = None,  # type: ignore[override]
             timeout_s: float = 30.0) -> procs.Result:
        self.ran.append(" ".join(argv))
        return procs.Result(status=1, output=b"")


@pytest.fixture
def slurm() -> StandIn:
    return StandIn()


def backend(slurm: StandIn, warned: list[dict[str, Any]],
            **cli: Any) -> tuple[PyslurmSlurm, RecordingCli]:
    rec = RecordingCli(**cli)
    api = PyslurmApi(slurm.module())
    return PyslurmSlurm(rec, lambda: api, lambda msg, **f: warned.append(f)), rec


class TestThroughPyslurm:
    def test_attach(self, slurm: StandIn) -> None:
        slurm.add_job(5)
        slurm.add_job(6, state="PENDING")
        be, rec = backend(slurm, [])
        assert not be.attach(5, {}).owned
        with pytest.raises(AllocationFailed, match=r"SLURM_JOB_ID=6 is not a running job "
                                                   r"\(PENDING\)"):
            be.attach(6, {})
        with pytest.raises(AllocationFailed, match=r"SLURM_JOB_ID=7 is not a running job "
                                                   r"\(Invalid job id specified\)"):
            be.attach(7, {})
        assert [] == rec.ran

    def test_job_info(self, slurm: StandIn) -> None:
        slurm.add_job(5)
        slurm.add_job(8, end_time=None)  # an unlimited job: pyslurm says None
        be, rec = backend(slurm, [])
        info = be.job_info(5)
        assert info is not None
        assert (1_900_000_000.0, 1001, 1002) == (info.end_time, info.uid, info.gid)
        info = be.job_info(8)
        assert info is not None
        assert info.end_time is None
        assert be.job_info(9) is None
        assert [] == rec.ran

    def test_step_id_is_the_newest_container_step(self, slurm: StandIn) -> None:
        step = SimpleNamespace
        slurm.add_job(5, steps={"extern": step(name="extern"), 0: step(name="scrun"),
                                1: step(name="scrun-signal"), 2: step(name="scrun")})
        be, rec = backend(slurm, [])
        assert 2 == be.step_id(5, lambda: True)
        slurm.add_job(6)
        assert be.step_id(6, lambda: False) is None  # no step, and it no longer runs
        assert [] == rec.ran

    def test_signal_through_the_runtime_first(self, slurm: StandIn, tmp_path: Path) -> None:
        srun = tmp_path / "srun"
        srun.write_text("#!/bin/sh\n")
        srun.chmod(0o755)
        be, rec = backend(slurm, [], runtime_kill="crun kill %n.%u.%j.%s.%t",
                          srun_path=str(srun))
        be.signal(5, 2, 10, {}, lambda: False)  # the helper step failed, the step has gone
        assert 1 == len(rec.ran)
        assert rec.ran[0].startswith(
            f"{procs.resolve_program('env', os.environ)} -u SLURM_NTASKS -u SLURM_NPROCS "
            f"{srun} --jobid=5 --job-name=scrun-signal")
        assert [] == slurm.calls

    def test_signal_without_runtime_kill(self, slurm: StandIn) -> None:
        """No RunTimeKill: the step as slurmctld has it is signalled (a step that has
        ended: nothing to do); the whole job (step unknown) stays with scancel."""
        slurm.add_job(5, steps={2: SimpleNamespace(name="scrun")})
        be, rec = backend(slurm, [])
        be.signal(5, 2, 15, {}, lambda: True)
        be.signal(5, 3, 15, {}, lambda: True)
        assert [("load_step", 5, 2), ("signal_job_step", 5, 2, 15),
                ("load_step", 5, 3)] == slurm.calls
        be.signal(5, None, 15, {}, lambda: True)
        assert ["scancel --signal=15 5"] == rec.ran

    def test_cancel(self, slurm: StandIn) -> None:
        """The job and a step through pyslurm; an unknown one is not an error (scancel)."""
        slurm.add_job(5, steps={1: SimpleNamespace(name="scrun")})
        be, rec = backend(slurm, [])
        be.cancel(5, 1)
        be.cancel(5, 4)
        be.cancel(5)
        be.cancel(77)
        assert [("load_step", 5, 1), ("kill_job_step", 5, 1, 9), ("load_step", 5, 4),
                ("kill_job", 5, 9), ("kill_job", 77, 9)] == slurm.calls
        assert "CANCELLED" == slurm.jobs[5]["state"]
        assert [] == rec.ran


class TestFallback:
    def test_failed_calls_are_logged_and_made_with_the_commands(self, slurm: StandIn) -> None:
        slurm.down = True
        warned: list[dict[str, Any]] = []
        be, rec = backend(slurm, warned)
        with pytest.raises(AllocationFailed):
            be.attach(5, {})  # squeue answers nothing here
        assert be.job_info(5) is None
        be.cancel(5, 1)
        be.signal(5, 1, 15, {}, lambda: True)
        assert be.step_id(5, lambda: False) is None
        assert ["attach", "job_info", "cancel", "signal", "step_id"] == [
            w["call"] for w in warned]
        assert "Unable to contact slurm controller" in warned[0]["error"]
        assert ["squeue --noheader --jobs=5 --format=%T",
                "squeue --noheader --jobs=5 --format=%e|%U|%G", "scancel 5.1",
                "scancel --signal=15 5.1",
                "squeue --noheader --steps --jobs=5 --format=%i|%j"] == [
                    r for r in rec.ran if r != "srun --version"]

    def test_without_pyslurm_everything_is_the_cli(self) -> None:
        rec = RecordingCli()
        be = PyslurmSlurm(rec, lambda: None, lambda msg, **f: None)
        assert be.job_info(5) is None
        be.cancel(5)
        assert be.step_id(5, lambda: False) is None
        assert ["squeue --noheader --jobs=5 --format=%e|%U|%G", "scancel 5",
                "squeue --noheader --steps --jobs=5 --format=%i|%j"] == rec.ran

    def test_other_errors_become_rpc_failures(self, slurm: StandIn) -> None:
        mod = slurm.module()
        mod.Job.load = staticmethod(lambda job_id: 1 / 0)
        with pytest.raises(RpcFailed, match="slurm_load_job: ZeroDivisionError"):
            PyslurmApi(mod).job(5)


class TestChoice:
    @pytest.fixture
    def loaded(self, slurm: StandIn, monkeypatch: pytest.MonkeyPatch) -> StandIn:
        monkeypatch.setattr(pyslurm_api, "load", lambda conf: PyslurmApi(slurm.module()))
        return slurm

    @pytest.mark.parametrize(("value", "mode"), [(None, "auto"), ("", "auto"), ("CLI", "cli"),
                                                 ("pyslurm", "pyslurm"), ("auto", "auto")])
    def test_mode(self, value: str | None, mode: str) -> None:
        env = {} if value is None else {choice.BACKEND_ENV: value}
        assert mode == choice.mode_of(env)

    def test_bad_mode_is_one_line(self) -> None:
        with pytest.raises(ConfigError) as info:
            choice.mode_of({choice.BACKEND_ENV: "c-api"})
        assert ("SCRUN_PY_SLURM_BACKEND='c-api': not one of auto, cli, pyslurm"
                == str(info.value))

    def test_matching_release(self, loaded: StandIn) -> None:
        for mode in ("auto", "pyslurm"):
            chosen = choice.choose(mode, None)
            assert ("pyslurm", (25, 11)) == (chosen.name, chosen.release)
        assert "auto: pyslurm 25.11.2 matches slurmctld 25.11.7" == choice.choose(
            "auto", None).reason
        assert ("cli", None) == choice.choose("cli", None)[::2]

    def test_other_release(self, loaded: StandIn) -> None:
        loaded.ctld_version = "24.11.5"
        why = "pyslurm 25.11.2 is built for Slurm 25.11, slurmctld runs 24.11.5"
        assert ("cli", f"auto: {why}") == choice.choose("auto", None)[:2]
        with pytest.raises(ConfigError, match=f"^SCRUN_PY_SLURM_BACKEND=pyslurm: {why}$"):
            choice.choose("pyslurm", None)

    def test_slurmctld_down(self, loaded: StandIn) -> None:
        """auto: the CLI; pyslurm asked for: pyslurm, its calls then fall back while
        slurmctld does not answer (the release comes from srun --version)."""
        loaded.down = True
        chosen = choice.choose("auto", None)
        assert "cli" == chosen.name
        assert chosen.reason.startswith("auto: pyslurm 25.11.2 cannot ask slurmctld its "
                                        "version (slurm_load_ctl_conf: Unable to contact")
        chosen = choice.choose("pyslurm", None)
        assert ("pyslurm", None) == (chosen.name, chosen.release)
        assert chosen.reason.endswith("; used as asked")
        chosen = choice.choose("pyslurm", None, lambda: (25, 11))
        assert ("pyslurm", (25, 11)) == (chosen.name, chosen.release)

    def test_forced_against_another_release(self, loaded: StandIn) -> None:
        """A slurmctld of another release does not answer pyslurm's RPC (as when it is
        down); the client commands' release tells it: a one-line refusal, not a backend
        whose every call fails."""
        loaded.down = True
        with pytest.raises(ConfigError, match=r"^SCRUN_PY_SLURM_BACKEND=pyslurm: pyslurm "
                           r"25\.11\.2 is built for Slurm 25\.11, the client commands are "
                           r"22\.05 \(slurm_load_ctl_conf: "):
            choice.choose("pyslurm", None, lambda: (22, 5))

    def test_not_loadable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("SLURM_CONF", raising=False)
        with pytest.raises(ConfigError, match=r"slurm\.conf is not readable"):
            choice.choose("pyslurm", str(tmp_path / "missing.conf"))
        conf = tmp_path / "slurm.conf"
        conf.write_text("ClusterName=x\n")
        monkeypatch.setitem(sys.modules, "pyslurm", None)  # an import that fails
        chosen = choice.choose("auto", str(conf))
        assert "cli" == chosen.name
        assert chosen.reason.startswith("auto: pyslurm is not installed")

    def test_deferred_auto_choice(self, loaded: StandIn) -> None:
        decision = choice.Decision()
        heard: list[choice.Choice] = []
        decision.start(None, None, heard.append)
        api = decision.api()
        assert api is not None
        assert (25, 11) == decision.release()
        assert ["pyslurm"] == [c.name for c in heard]

    def test_auto_does_not_import_a_pyslurm_of_another_release(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The installed pyslurm's release (its package metadata) against the client
        commands': a mismatch chooses the CLI without loading pyslurm, and hands the
        client release on to the CLI backend."""
        loads: list[str | None] = []

        def load(conf: str | None) -> PyslurmApi:
            loads.append(conf)
            raise pyslurm_api.Unavailable("must not be loaded")

        monkeypatch.setattr(pyslurm_api, "load", load)
        monkeypatch.setattr(choice, "installed_release", lambda: (25, 11))
        chosen = choice.choose("auto", None, lambda: (22, 5))
        assert ("cli", (22, 5), []) == (chosen.name, chosen.release, loads)
        assert ("auto: pyslurm is built for Slurm 25.11, the client commands are 22.05"
                == chosen.reason)
        # the same release, or a client release that cannot be told: pyslurm is loaded
        for client in ((25, 11), None):
            def release(c: tuple[int, int] | None = client) -> tuple[int, int] | None:
                return c

            chosen = choice.choose("auto", None, release)
            assert "cli" == chosen.name and chosen.reason.endswith("must not be loaded")
        assert [None, None] == loads

    def test_installed_release_from_metadata(self, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
        """From the first pyslurm metadata directory on sys.path, as importlib.metadata
        would say; none: None."""
        first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
        for d in (first, second, other):
            d.mkdir()
        (first / "pyslurm-25.11.2.dist-info").mkdir()
        (second / "pyslurm-24.11.0.dist-info").mkdir()
        (other / "pyslurmx-1.0.dist-info").mkdir()
        (other / "click-8.1.dist-info").mkdir()
        monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(other), str(first),
                                          str(second)])
        assert (25, 11) == choice.installed_release()
        monkeypatch.setattr(sys, "path", [str(second), str(first)])
        assert (24, 11) == choice.installed_release()
        monkeypatch.setattr(sys, "path", [str(other)])
        assert choice.installed_release() is None
        (other / "pyslurm-23.02.1-py3.11.egg-info").mkdir()
        assert (23, 2) == choice.installed_release()

    def test_installed_as_importlib_util_finds_it(self, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
        import importlib.util

        assert (importlib.util.find_spec("pyslurm") is not None) == choice.pyslurm_installed()
        monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
        monkeypatch.setattr(sys, "path", [str(tmp_path)])
        sys.path_importer_cache.pop(str(tmp_path), None)
        assert not choice.pyslurm_installed()
        (tmp_path / "pyslurm").mkdir()
        (tmp_path / "pyslurm" / "__init__.py").write_text("")
        sys.path_importer_cache.pop(str(tmp_path), None)
        assert choice.pyslurm_installed()
        assert importlib.util.find_spec("pyslurm") is not None

    def test_installed_release_matches_importlib_metadata(self) -> None:
        """Where pyslurm is installed, the same answer as importlib.metadata's."""
        from importlib import metadata

        try:
            version = metadata.version("pyslurm")
        except metadata.PackageNotFoundError:
            assert choice.installed_release() is None
        else:
            from scrun_py.slurm import pyslurm_api

            assert pyslurm_api.release_of(version) == choice.installed_release()
