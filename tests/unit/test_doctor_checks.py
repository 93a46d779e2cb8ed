"""Each of doctor's checks (scrun_py/commands/doctor/) on its own: a `Context` made by
hand, the commands' answers given (no command runs), each cause the check tells apart.
tests/unit/test_doctor.py runs the whole verb with stand-in commands."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.errors import ConfigError
from scrun_py.base.invocation import Invocation
from scrun_py.commands import doctor
from scrun_py.commands.doctor import context, engines, report, runtime, site_files, slurm
from scrun_py.commands.doctor.context import Context, Probe
from scrun_py.commands.doctor.report import Check

RUN_CONF = ('RunTimeQuery="crun state %n.%u.%j.%s.%t"\n'
            'RunTimeKill="crun kill %n.%u.%j.%s.%t"\n'
            'RunTimeDelete="crun delete --force %n.%u.%j.%s.%t"\n'
            'RunTimeRun="exec crun run --bundle %b %n.%u.%j.%s.%t"\n')
LUA = ("function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id,"
       " user_id, group_id, job_env)\n  return slurm.SUCCESS\nend\n"
       "function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path,"
       " orig_root_path, spool_dir, config_file, jobid, user_id, group_id)\n"
       "  return slurm.SUCCESS\nend\n")


def _ctx(tmp_path: Path, answers: dict[str, tuple[int, str]] | None = None,
         conf_problem: str = "", slurm_conf_name: str | None = None) -> Context:
    """A context for a slurm.conf in tmp_path/etc whose commands answered `answers`."""
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    inv = Invocation(root_dir=str(tmp_path / "root"), slurm_conf_name=slurm_conf_name)
    ctx = Context(inv, etc / "slurm.conf", {}, conf_problem, [])
    ctx.deadline = time.monotonic() + context.PROBE_TIMEOUT_S
    ctx.probes = {name: Probe(lambda said=said: said) for name, said in (answers or {}).items()}
    return ctx


def _said(check: Check) -> tuple[str, str]:
    return check.status, check.found


@pytest.fixture(autouse=True)
def _no_system_site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No system scrun-py.toml, no SCRUN_PY_LUA, no SLURM_CONF from the caller."""
    from scrun_py.site import site_conf

    monkeypatch.setattr(site_conf, "system_file", lambda: tmp_path / "no-system.toml")
    for name in ("SCRUN_PY_LUA", "SLURM_CONF", "SCRUN_PY_SLURM_BACKEND", "CONTAINERS_CONF"):
        monkeypatch.delenv(name, raising=False)


class TestReport:
    def test_table(self) -> None:
        """A mark per status, names padded to the longest, `fix:` only under a check
        that is not ok."""
        checks = [Check("a", report.OK, "fine", "unused"), Check("long name", report.FAIL,
                                                                 "broken", "mend it"),
                  Check("w", report.WARN, "hmm"), Check("s", report.SKIP, "not checked")]
        assert ("✔ a          fine\n"
                "✘ long name  broken\n"
                "             fix: mend it\n"
                "! w          hmm\n"
                "- s          not checked") == report.render_table(checks)

    def test_json(self) -> None:
        assert [{"name": "a", "status": "failed", "found": "x", "fix": "y"}] == \
            report.as_json([Check("a", report.FAIL, "x", "y")])

    def test_fatal(self) -> None:
        assert (True, False) == (Check("a", report.FAIL, "").fatal,
                                 Check("a", report.WARN, "").fatal)


class TestContext:
    def test_command_not_found(self) -> None:
        assert (procs.NOT_STARTED_STATUS, "no-such-command-x: not found") == \
            context.run_command(["no-such-command-x"])

    def test_command_no_answer(self) -> None:
        rc, said = context.run_command(["sleep", "5"], timeout_s=0.2)
        assert (procs.TIMEOUT_STATUS, "sleep 5: no answer within 0.2s") == (rc, said)

    def test_resolve_program(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Only absolute PATH entries count."""
        monkeypatch.setenv("PATH", "relative:/usr/bin:/bin")
        assert context.resolve_program("sh") is not None
        assert context.resolve_program("no-such-command-x") is None

    def test_probe_without_answer(self) -> None:
        """A probe still running at the deadline (and a second more) says so."""
        probe = Probe(lambda: (time.sleep(3), (0, ""))[1])
        assert (procs.TIMEOUT_STATUS, "thing: no answer") == probe.result(
            time.monotonic() - 1.0, "thing")

    def test_probe_that_crashes(self) -> None:
        def boom() -> tuple[int, str]:
            raise RuntimeError("x")

        assert (1, "check crashed: RuntimeError('x')") == Probe(boom).result(
            time.monotonic() + 1, "boom")

    def test_slurm_conf_problem(self, tmp_path: Path) -> None:
        (tmp_path / "slurm.conf").write_text("")
        assert ("", f"{tmp_path / 'nope'}: not found", f"{tmp_path}: not a regular file") \
            == (context.slurm_conf_problem(tmp_path / "slurm.conf"),
                context.slurm_conf_problem(tmp_path / "nope"),
                context.slurm_conf_problem(tmp_path))

    def test_no_slurm_command_without_slurm_conf(self, tmp_path: Path) -> None:
        """srun and scontrol retry a missing slurm.conf for 60 s: not started then."""
        ctx = _ctx(tmp_path, conf_problem="missing")
        assert ["docker", "munge", "unshare"] == sorted(context.probe_work(ctx))
        ctx = _ctx(tmp_path)
        assert ["docker", "munge", "ping", "unshare", "version"] == sorted(
            context.probe_work(ctx))
        ctx.missing = ["srun"]
        assert "version" not in context.probe_work(ctx)

    def test_start(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """start: the slurm.conf in use, its problem, SLURM_CONF for Slurm's commands."""
        monkeypatch.setenv("PATH", str(tmp_path))  # nothing to run
        inv = Invocation(root_dir=str(tmp_path), slurm_conf_name=str(tmp_path / "s.conf"))
        ctx = context.start(inv, timeout_s=1.0)
        assert (tmp_path / "s.conf", f"{tmp_path / 's.conf'}: not found",
                str(tmp_path / "s.conf")) == (ctx.slurm_conf, ctx.conf_problem,
                                              ctx.env["SLURM_CONF"])
        assert "salloc" in ctx.missing
        assert procs.NOT_STARTED_STATUS == ctx.probe("docker", "docker info")[0]

    def test_within(self) -> None:
        assert 3 == context.within(lambda: 3, time.monotonic() + 1)
        with pytest.raises(ConfigError):
            context.within(lambda: (_ for _ in ()).throw(ConfigError("x")),
                           time.monotonic() + 1)
        with pytest.raises(TimeoutError):
            context.within(lambda: time.sleep(2), time.monotonic())


class TestSlurmConfFound:
    def test_ok(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        assert ("ok", str(ctx.slurm_conf)) == _said(slurm.slurm_conf_found(ctx))

    @pytest.mark.parametrize(("flag", "env", "source"), [
        ("/x/slurm.conf", None, "-f"), (None, "/x/slurm.conf", "SLURM_CONF"),
        (None, None, "the default path")])
    def test_says_where_the_path_came_from(self, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, flag: str | None,
                                           env: str | None, source: str) -> None:
        if env:
            monkeypatch.setenv("SLURM_CONF", env)
        check = slurm.slurm_conf_found(_ctx(tmp_path, conf_problem="P: not found",
                                            slurm_conf_name=flag))
        assert ("failed", f"P: not found (from {source})") == _said(check)
        assert "SLURM_CONF" in check.fix


class TestSlurmCommands:
    def test_missing(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        ctx.missing = ["salloc", "sinfo"]
        assert ("failed", "missing: salloc, sinfo") == _said(slurm.slurm_commands(ctx))

    def test_skipped_without_slurm_conf(self, tmp_path: Path) -> None:
        check = slurm.slurm_commands(_ctx(tmp_path, conf_problem="P: not found"))
        assert ("skipped", True) == (check.status, check.found.endswith("(P: not found)"))

    def test_release_read(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path, {"version": (0, "slurm-wlm 22.05.8")})
        assert ("ok", "slurm-wlm 22.05.8") == _said(slurm.slurm_commands(ctx))
        assert (22, 5) == ctx.version

    def test_too_old(self, tmp_path: Path) -> None:
        check = slurm.slurm_commands(_ctx(tmp_path, {"version": (0, "slurm 21.08.5")}))
        assert ("failed", "scrun-py needs Slurm 22.05 or newer") == (check.status, check.fix)

    @pytest.mark.parametrize(("answer", "found"), [
        ((1, "boom"), "srun --version: boom"),
        ((procs.TIMEOUT_STATUS, "srun --version: no answer"), "srun --version: no answer")])
    def test_no_release(self, tmp_path: Path, answer: tuple[int, str], found: str) -> None:
        assert ("failed", found) == _said(slurm.slurm_commands(_ctx(tmp_path,
                                                                    {"version": answer})))


class TestSlurmRelease:
    def test_unknown(self, tmp_path: Path) -> None:
        assert ("failed", "unknown (no working srun)") == _said(
            slurm.slurm_release(_ctx(tmp_path)))

    def test_skipped_without_slurm_conf(self, tmp_path: Path) -> None:
        assert "skipped" == slurm.slurm_release(_ctx(tmp_path, conf_problem="P")).status

    def test_22_05_warns(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        ctx.version = (22, 5)
        check = slurm.slurm_release(ctx)
        assert ("warning", True) == (check.status,
                                     check.found.startswith("22.05: -; not on this release: "))
        assert "23.02" in check.fix

    def test_newest_ok(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        ctx.version = (99, 0)
        check = slurm.slurm_release(ctx)
        assert ("ok", False) == (check.status, "not on this release" in check.found)


class TestSlurmctld:
    def test_up(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path, {"ping": (0, "Slurmctld(primary) at ctl is UP")})
        assert ("ok", "Slurmctld(primary) at ctl is UP") == _said(slurm.slurmctld(ctx))

    def test_down(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path, {"ping": (1, "Slurmctld(primary) at ctl is DOWN\n*****\n")})
        check = slurm.slurmctld(ctx)
        assert ("failed", "Slurmctld(primary) at ctl is DOWN") == _said(check)
        assert "SlurmctldPort" in check.fix

    def test_munge_fails_here(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path, {"ping": (1, "scontrol: error: Munge encode failed: x\n"
                                          "Slurmctld(primary) at ctl is DOWN\n")})
        check = slurm.slurmctld(ctx)
        assert ("failed", "Slurmctld(primary) at ctl is DOWN: this host cannot authenticate "
                          "to it (Munge encode failed: x)") == _said(check)
        assert "start munged" in check.fix

    def test_skipped_without_slurm_conf(self, tmp_path: Path) -> None:
        assert "skipped" == slurm.slurmctld(_ctx(tmp_path, conf_problem="P")).status


class TestSlurmBackend:
    def test_auto_without_pyslurm(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from scrun_py.slurm import choice

        monkeypatch.setattr(choice, "pyslurm_installed", lambda: False)
        assert ("ok", "cli (auto: pyslurm is not installed)") == _said(
            slurm.slurm_backend(_ctx(tmp_path)))

    def test_cli(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SCRUN_PY_SLURM_BACKEND", "cli")
        check = slurm.slurm_backend(_ctx(tmp_path, conf_problem="P"))
        assert ("ok", True) == (check.status, check.found.startswith("cli ("))

    def test_bad_value(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SCRUN_PY_SLURM_BACKEND", "fast")
        check = slurm.slurm_backend(_ctx(tmp_path))
        assert ("failed", True) == (check.status, "not one of" in check.found)
        assert "to auto or cli" in check.fix

    def test_skipped_without_slurm_conf(self, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SCRUN_PY_SLURM_BACKEND", "pyslurm")
        assert "skipped" == slurm.slurm_backend(_ctx(tmp_path, conf_problem="P")).status

    def test_no_answer(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """pyslurm's RPCs that do not return by the deadline: a failure naming it."""
        from scrun_py.slurm import choice

        monkeypatch.setenv("SCRUN_PY_SLURM_BACKEND", "pyslurm")
        monkeypatch.setattr(choice, "choose", lambda *_: time.sleep(2))
        ctx = _ctx(tmp_path)
        ctx.deadline, ctx.timeout_s = time.monotonic(), 0.5
        check = slurm.slurm_backend(ctx)
        assert ("failed", "pyslurm: no answer from slurmctld within 0.5s") == _said(check)
        assert "SCRUN_PY_SLURM_BACKEND=cli" in check.fix


class TestMunge:
    @pytest.mark.parametrize(("answer", "unmunged", "found"), [
        ((0, "STATUS: Success"), True, ("ok", "credential encoded and decoded")),
        ((15, "unmunge: Error: Invalid credential"), True,
         ("failed", "unmunge: Error: Invalid credential")),
        ((procs.NOT_STARTED_STATUS, "munge: not found"), False,
         ("failed", "munge: not installed on this node")),
        ((procs.TIMEOUT_STATUS, "munge -n: no answer"), False,
         ("failed", "munged does not answer: munge -n: no answer")),
        ((6, "munge: Error: Failed to connect"), False,
         ("failed", "munged is not running: munge: Error: Failed to connect")),
        ((1, ""), False, ("failed", "exit 1"))])
    def test_causes(self, tmp_path: Path, answer: tuple[int, str], unmunged: bool,
                    found: tuple[str, str]) -> None:
        ctx = _ctx(tmp_path, {"munge": answer})
        ctx.unmunged = unmunged
        assert found == _said(slurm.munge(ctx))


class TestOciConf:
    def _write(self, tmp_path: Path, text: str) -> Context:
        ctx = _ctx(tmp_path)
        (ctx.slurm_conf.parent / "oci.conf").write_text(text)
        return ctx

    def test_ok(self, tmp_path: Path) -> None:
        ctx = self._write(tmp_path, RUN_CONF)
        oci = ctx.slurm_conf.parent / "oci.conf"
        assert ("ok", f"{oci} (run mode; beside slurm.conf)") == _said(runtime.oci_conf(ctx))
        assert (True, "crun") == (ctx.oci_conf_ok, ctx.runtime_cmd)

    def test_skipped_without_slurm_conf(self, tmp_path: Path) -> None:
        check = runtime.oci_conf(_ctx(tmp_path, conf_problem="P"))
        assert ("skipped", "not checked: it is read next to slurm.conf (P)") == _said(check)

    def test_missing(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        conf = ctx.slurm_conf
        assert ("failed", f"not found: {conf.parent / 'oci.conf'} (it is read beside the "
                          f"slurm.conf in use, and {conf} is missing too; name another "
                          "slurm.conf with -f or SLURM_CONF)") == _said(runtime.oci_conf(ctx))

    def test_invalid(self, tmp_path: Path) -> None:
        ctx = self._write(tmp_path, RUN_CONF + "Bogus=1\n")
        check = runtime.oci_conf(ctx)
        assert ("failed", True, False) == (check.status, "Bogus: unknown key" in check.found,
                                           ctx.oci_conf_ok)

    def test_this_slurm_cannot_run_it(self, tmp_path: Path) -> None:
        ctx = self._write(tmp_path, RUN_CONF.replace("%u", "%U"))
        ctx.version = (22, 5)
        check = runtime.oci_conf(ctx)
        assert ("failed", True) == (check.status, "%U unknown to slurm 22.05" in check.found)
        assert check.fix.startswith("this Slurm (22.5) cannot run this oci.conf")

    def test_create_start_warns(self, tmp_path: Path) -> None:
        ctx = self._write(tmp_path, 'RunTimeCreate="runc create %n -b %b"\n'
                                    'RunTimeStart="runc start %n"\nRunTimeQuery="runc state %n"\n'
                                    'RunTimeKill="runc kill -a %n"\n'
                                    'RunTimeDelete="runc delete --force %n"\n')
        check = runtime.oci_conf(ctx)
        assert ("warning", True, "runc") == (check.status, check.found.endswith(
            "create/start mode (RunTimeCreate)"), ctx.runtime_cmd)

    def test_run_without_exec_warns(self, tmp_path: Path) -> None:
        ctx = self._write(tmp_path, RUN_CONF.replace('"exec ', '"'))
        check = runtime.oci_conf(ctx)
        assert ("warning", True) == (check.status, check.found.endswith(
            "RunTimeRun does not start with exec"))

    def test_runtime_words(self) -> None:
        from scrun_py.site.oci_conf import parse_oci_conf

        assert ((True, "crun"), (False, "crun"), (False, None)) == (
            runtime.runtime_words(parse_oci_conf(RUN_CONF)),
            runtime.runtime_words(parse_oci_conf(RUN_CONF.replace('"exec ', '"'))),
            runtime.runtime_words(parse_oci_conf("IgnoreFileConfigJson=true\n")))


class TestOciRuntime:
    def test_skipped_without_oci_conf(self, tmp_path: Path) -> None:
        assert "skipped" == runtime.oci_runtime(_ctx(tmp_path)).status

    def test_nothing_to_inspect(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        ctx.oci_conf_ok = True
        assert ("warning", "no RunTimeRun/RunTimeCreate to inspect") == _said(
            runtime.oci_runtime(ctx))

    def test_installed_or_not(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        (tmp_path / "crun").write_text("#!/bin/sh\n")
        (tmp_path / "crun").chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))
        ctx = _ctx(tmp_path)
        ctx.oci_conf_ok, ctx.runtime_cmd = True, "crun"
        assert ("ok", str(tmp_path / "crun")) == _said(runtime.oci_runtime(ctx))
        ctx.runtime_cmd = "runc"
        assert ("failed", "runc: not installed on this node (not on PATH)") == _said(
            runtime.oci_runtime(ctx))


class TestUserNamespaces:
    def test_limit_zero(self, tmp_path: Path) -> None:
        (tmp_path / "max").write_text("0\n")
        check = runtime.user_namespaces(_ctx(tmp_path), str(tmp_path / "max"))
        assert ("failed", "user.max_user_namespaces = 0") == _said(check)

    def test_unshare_fails(self, tmp_path: Path) -> None:
        (tmp_path / "max").write_text("100\n")
        ctx = _ctx(tmp_path, {"unshare": (1, "unshare: Operation not permitted")})
        assert ("failed", "unshare: Operation not permitted") == _said(
            runtime.user_namespaces(ctx, str(tmp_path / "max")))

    def test_ok(self, tmp_path: Path) -> None:
        (tmp_path / "max").write_text("100\n")
        ctx = _ctx(tmp_path, {"unshare": (0, "")})
        assert ("ok", "max_user_namespaces=100") == _said(
            runtime.user_namespaces(ctx, str(tmp_path / "max")))


class TestRootDir:
    def test_usable_once_made(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        assert ("ok", f"{tmp_path / 'root'} (usable)") == _said(runtime.root_dir(ctx))

    def test_not_writable(self, tmp_path: Path) -> None:
        """Its nearest existing parent is not a directory (root can write any other)."""
        (tmp_path / "file").write_text("")
        inv = Invocation(root_dir=str(tmp_path / "file" / "root"))
        ctx = Context(inv, tmp_path / "slurm.conf", {}, "", [])
        assert ("failed", f"{tmp_path / 'file' / 'root'}: not writable (nearest existing: "
                          f"{tmp_path / 'file'})") == _said(runtime.root_dir(ctx))


class TestScrunLua:
    def test_skipped_without_slurm_conf(self, tmp_path: Path) -> None:
        assert "skipped" == site_files.scrun_lua(_ctx(tmp_path, conf_problem="P")).status

    def test_none_is_a_warning(self, tmp_path: Path) -> None:
        assert ("warning", f"none ({tmp_path / 'etc' / 'scrun.lua'} not found): "
                           "stage_in/stage_out are no-ops") == _said(
            site_files.scrun_lua(_ctx(tmp_path)))

    def test_loads(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        (ctx.slurm_conf.parent / "scrun.lua").write_text(LUA)
        check = site_files.scrun_lua(ctx)
        assert ("ok", True) == (check.status, check.found.endswith(": loads, both hooks "
                                                                   "defined"))

    def test_hook_missing(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        (ctx.slurm_conf.parent / "scrun.lua").write_text(
            "function slurm_scrun_stage_in() return 0 end\n")
        check = site_files.scrun_lua(ctx)
        assert ("failed", True) == (check.status, "scrun.lua" in check.found)


class TestSiteFile:
    def _ctx(self, tmp_path: Path, text: str | None) -> Context:
        ctx = _ctx(tmp_path)
        if text is not None:
            (ctx.slurm_conf.parent / "scrun-py.toml").write_text(text)
        return ctx

    def test_skipped_without_slurm_conf(self, tmp_path: Path) -> None:
        assert "skipped" == site_files.site_file(_ctx(tmp_path, conf_problem="P")).status

    def test_none(self, tmp_path: Path) -> None:
        ctx = self._ctx(tmp_path, None)
        assert ("ok", f"{ctx.slurm_conf.parent / 'scrun-py.toml'} (beside slurm.conf): none "
                      "(no audit trail, no policy)") == _said(site_files.site_file(ctx))

    def test_summary(self, tmp_path: Path) -> None:
        ctx = self._ctx(tmp_path, '[policy]\nreadonly_rootfs = true\n[trust]\n'
                                  'lua_override = false\n')
        assert ("ok", "no audit trail; policy: readonly_rootfs; SCRUN_PY_LUA refused") == (
            site_files.site_file(ctx).status,
            site_files.site_file(ctx).found.split(": ", 1)[1])

    def test_typo_is_fatal(self, tmp_path: Path) -> None:
        check = site_files.site_file(self._ctx(tmp_path, "[policy]\nreadonly_rootf = true\n"))
        assert ("failed", True) == (check.status, "unknown key readonly_rootf" in check.found)
        assert "every create fails until then" in check.fix


class TestEngines:
    def test_none(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(engines, "podman_confs", lambda: (tmp_path / "none.conf",))
        check = engines.engines(_ctx(tmp_path, {"docker": (1, "")}))
        assert ("warning", "no engine has scrun-py as a runtime") == _said(check)

    def test_docker_and_podman(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        conf = tmp_path / "containers.conf"
        conf.write_text('[engine.runtimes]\nscrun-py = ["/usr/bin/scrun-py"]\n')
        monkeypatch.setattr(engines, "podman_confs", lambda: (tmp_path / "none.conf", conf))
        ctx = _ctx(tmp_path, {"docker": (0, json.dumps({"scrun-py": {"path": "x"}}))})
        assert ("ok", f"scrun-py registered with docker, podman ({conf})") == _said(
            engines.engines(ctx))

    def test_podman_confs(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The system's, $CONTAINERS_CONF, the user's."""
        monkeypatch.setenv("CONTAINERS_CONF", "/x/c.conf")
        assert (Path("/etc/containers/containers.conf"), Path("/x/c.conf")) == \
            engines.podman_confs()[:2]


class TestRunChecks:
    def test_order(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The table's order; without slurm.conf nothing waits for Slurm."""
        monkeypatch.setenv("PATH", str(tmp_path))
        inv = Invocation(root_dir=str(tmp_path), slurm_conf_name=str(tmp_path / "s.conf"))
        names = [c.name for c in doctor.run_checks(inv, timeout_s=1.0)]
        assert ["slurm.conf", "Slurm client commands", "Slurm release",
                "slurmctld answering", "Slurm backend", "munge", "oci.conf", "scrun.lua",
                "scrun-py.toml", "OCI runtime", "unprivileged user namespaces", "--root",
                "docker/podman runtime", "root engine", "staging base"] == names

    def test_a_crash_is_a_failed_line(self, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        def boom(ctx: Context) -> Check:
            raise RuntimeError("x")

        monkeypatch.setenv("PATH", str(tmp_path))
        monkeypatch.setattr(runtime, "root_dir", boom)
        inv = Invocation(root_dir=str(tmp_path), slurm_conf_name=str(tmp_path / "s.conf"))
        checks = doctor.run_checks(inv, timeout_s=1.0)
        assert Check("boom", "failed", "check crashed: RuntimeError('x')") == checks[11]
