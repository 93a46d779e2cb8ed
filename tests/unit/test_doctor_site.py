"""doctor at a site: where it found slurm.conf, scrun-py.toml and scrun.lua (and says so),
the root engines that make every container a job of root, and the staging script's base
as a node sees it (commands/doctor/staging.py), each check on a `Context` made by hand."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from scrun_py.base import conf_lookup, layout
from scrun_py.base.conf_lookup import Choice
from scrun_py.commands.doctor import context, engines, site_files, slurm, staging
from scrun_py.commands.doctor.context import Context
from tests.unit.test_doctor_checks import LUA, _ctx, _said

STAGING_HEAD = ('--[[\nscrun-staging.lua: a scrun.lua for clusters where ...\n]]\n'
                '-------- settings\n')


def _staging_script(path: Path, staging_base: str = "/tmp/scrun-staging-%u",
                    cache: str = "true", cache_base: str = "/tmp/scrun-cache-%u") -> Path:
    path.write_text(STAGING_HEAD + f'local STAGING_BASE = "{staging_base}"\n'
                    f"local SYNC_BACK = true\nlocal CACHE = {cache}\n"
                    f'local CACHE_BASE = "{cache_base}"\n' + LUA)
    return path


class TestSlurmConfOrigin:
    @pytest.mark.parametrize(("choice", "origin"), [
        (Choice("/x/slurm.conf", conf_lookup.OPTION, ("-f",)), "named by -f"),
        (Choice("/x/slurm.conf", conf_lookup.ENV), "named by SLURM_CONF"),
        (Choice("/x/slurm.conf", conf_lookup.DEFAULT), "the compiled-in default"),
        (Choice("/x/slurm.conf", conf_lookup.PREFIX, (), "/opt/s/bin/srun"),
         "the compiled-in default of /opt/s/bin/srun"),
    ])
    def test_ok_says_how_it_was_found(self, tmp_path: Path, choice: Choice, origin: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(layout, "CONFIGLESS_SLURM_CONF", str(tmp_path / "none.conf"))
        ctx = _ctx(tmp_path)
        ctx.choice = choice
        assert ("ok", f"{ctx.slurm_conf} ({origin})") == _said(slurm.slurm_conf_found(ctx))

    def test_default_hides_a_configless_copy(self, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """A compiled-in default found while sackd's copy exists: a warning that the copy
        is not read (Slurm's commands read the default too)."""
        ctx = _ctx(tmp_path)
        copy = tmp_path / "run" / "slurm.conf"
        copy.parent.mkdir()
        copy.write_text("")
        monkeypatch.setattr(layout, "CONFIGLESS_SLURM_CONF", str(copy))
        ctx.choice = Choice(str(ctx.slurm_conf), conf_lookup.DEFAULT)
        check = slurm.slurm_conf_found(ctx)
        assert ("warning", f"{ctx.slurm_conf} (the compiled-in default); the configless copy "
                           f"{copy} is not read: this file comes first, for Slurm's commands "
                           "too") == _said(check)
        ctx.choice = Choice(str(ctx.slurm_conf), conf_lookup.ENV)
        assert "ok" == slurm.slurm_conf_found(ctx).status  # named: the caller's choice

    def test_configless_copy(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """sackd's copy: said to be the configless copy sackd wrote."""
        ctx = _ctx(tmp_path)
        monkeypatch.setattr(layout, "CONFIGLESS_SLURM_CONF", str(ctx.slurm_conf))
        ctx.choice = Choice(str(ctx.slurm_conf), conf_lookup.CONFIGLESS)
        assert ("ok", f"{ctx.slurm_conf} (configless copy, written by sackd)") == \
            _said(slurm.slurm_conf_found(ctx))

    def test_none_found_names_every_place(self, tmp_path: Path) -> None:
        looked = ("-f (not given)", "SLURM_CONF (not set)", "/etc/slurm/slurm.conf",
                  "/run/slurm/conf/slurm.conf")
        ctx = _ctx(tmp_path, conf_problem=context.NOT_FOUND)
        ctx.choice = Choice("/etc/slurm/slurm.conf", conf_lookup.NONE, looked)
        check = slurm.slurm_conf_found(ctx)
        assert ("failed", "no slurm.conf found (looked at -f (not given), SLURM_CONF (not "
                          "set), /etc/slurm/slurm.conf, /run/slurm/conf/slurm.conf)") == \
            _said(check)
        assert "sackd --conf-server" in check.fix

    def test_start_on_a_configless_node(self, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
        """context.start without -f and SLURM_CONF on a node with only sackd's copy: the
        copy is in use, nothing is skipped for want of slurm.conf."""
        run = tmp_path / "run"
        run.mkdir()
        (run / "slurm.conf").write_text("ClusterName=c\n")
        monkeypatch.setattr(layout, "DEFAULT_SLURM_CONF", str(tmp_path / "etc" / "slurm.conf"))
        monkeypatch.setattr(layout, "CONFIGLESS_SLURM_CONF", str(run / "slurm.conf"))
        monkeypatch.delenv("SLURM_CONF", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
        from scrun_py.base.invocation import Invocation

        ctx = context.start(Invocation(root_dir=str(tmp_path)), timeout_s=0.5)
        assert (run / "slurm.conf", "", str(run / "slurm.conf")) == \
            (ctx.slurm_conf, ctx.conf_problem, ctx.env["SLURM_CONF"])


class TestSiteFilesOrigin:
    def test_system_file_on_a_configless_node(self, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
        """The slurm.conf in use is sackd's copy: scrun-py.toml is the system's, and
        doctor says why; scrun.lua is sackd's copy, beside slurm.conf."""
        from scrun_py.site import site_conf

        ctx = _ctx(tmp_path)
        system = tmp_path / "sys" / "scrun-py.toml"
        system.parent.mkdir()
        system.write_text("[policy]\nreadonly_rootfs = true\n")
        monkeypatch.setattr(site_conf, "system_file", lambda: system)
        monkeypatch.setattr(layout, "CONFIGLESS_SLURM_CONF", str(ctx.slurm_conf))
        (ctx.slurm_conf.parent / "scrun.lua").write_text(LUA)
        assert ("ok", f"{system} (the system's: slurm.conf is a configless copy, which never "
                      "has one): no audit trail; policy: readonly_rootfs") == \
            _said(site_files.site_file(ctx))
        lua = ctx.slurm_conf.parent / "scrun.lua"
        assert ("ok", f"{lua} (beside slurm.conf): loads, both hooks defined") == \
            _said(site_files.scrun_lua(ctx))
        assert str(lua) == ctx.lua_script

    def test_pinned(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """[trust] site_files = "system": both say the system's file pins them."""
        from scrun_py.site import site_conf

        ctx = _ctx(tmp_path)
        system = tmp_path / "sys" / "scrun-py.toml"
        system.parent.mkdir()
        system.write_text('[trust]\nsite_files = "system"\n')
        (system.parent / "slurm.conf").write_text("")
        (system.parent / "scrun.lua").write_text(LUA)
        monkeypatch.setattr(site_conf, "system_file", lambda: system)
        assert ("ok", f"{system} (the system's: [trust] site_files pins it): no audit trail; "
                      "no policy; site files pinned to the system's") == \
            _said(site_files.site_file(ctx))
        assert ("ok", f"{system.parent / 'scrun.lua'} (the system's: [trust] site_files "
                      "pins it): loads, both hooks defined") == \
            _said(site_files.scrun_lua(ctx))

    def test_lua_override(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        script = tmp_path / "mine.lua"
        script.write_text(LUA)
        monkeypatch.setenv("SCRUN_PY_LUA", str(script))
        assert ("ok", f"{script} (named by SCRUN_PY_LUA): loads, both hooks defined") == \
            _said(site_files.scrun_lua(_ctx(tmp_path)))


class TestRootEngines:
    def test_root_dockerd_from_docker_info(self, tmp_path: Path) -> None:
        """docker info of a daemon that is not rootless lists scrun-py: a warning saying
        what it means."""
        out = json.dumps({"runc": {"path": "runc"}, "scrun-py": {"path": "/v/bin/scrun-py"}})
        ctx = _ctx(tmp_path, {"docker": (0, out + '\n["name=seccomp,profile=builtin"]')})
        check = engines.root_engines(ctx, tmp_path / "none.json", ())
        assert ("warning", "root dockerd (docker info) has scrun-py as a runtime: its "
                           "containers become jobs of root (no per-user accounting, limits "
                           "or fair share)") == _said(check)
        assert "rootless" in check.fix

    def test_rootless_dockerd_is_fine(self, tmp_path: Path) -> None:
        out = json.dumps({"scrun-py": {"path": "/v/bin/scrun-py"}})
        ctx = _ctx(tmp_path, {"docker": (0, out + '\n["name=seccomp","name=rootless"]')})
        assert "ok" == engines.root_engines(ctx, tmp_path / "none.json", ()).status

    def test_daemon_json(self, tmp_path: Path) -> None:
        """Root's daemon.json names a runtime whose path is scrun-py (docker not
        answering, as for a user outside the docker group)."""
        daemon = tmp_path / "daemon.json"
        daemon.write_text(json.dumps({"runtimes": {"slurm": {"path": "/opt/scrun-py/bin/"
                                                                     "scrun-py"}}}))
        ctx = _ctx(tmp_path, {"docker": (1, "permission denied")})
        assert ("warning", f"root dockerd ({daemon}) has") == \
            (engines.root_engines(ctx, daemon, ()).status,
             engines.root_engines(ctx, daemon, ()).found[:len(f"root dockerd ({daemon}) has")])

    def test_root_podman(self, tmp_path: Path) -> None:
        conf = tmp_path / "containers.conf"
        conf.write_text('[engine.runtimes]\nscrun-py = ["/usr/bin/scrun-py"]\n')
        ctx = _ctx(tmp_path, {"docker": (1, "")})
        check = engines.root_engines(ctx, tmp_path / "none.json", (tmp_path / "x", conf))
        assert ("warning", True) == (check.status,
                                     check.found.startswith(f"root's podman ({conf}) has"))

    def test_none(self, tmp_path: Path) -> None:
        conf = tmp_path / "containers.conf"
        conf.write_text('[engine]\nruntime = "crun"\n')
        daemon = tmp_path / "daemon.json"
        daemon.write_text("{not json")
        ctx = _ctx(tmp_path, {"docker": (0, '{"runc":{"path":"runc"}}\n[]')})
        assert ("ok", "no root engine has scrun-py as a runtime") == \
            _said(engines.root_engines(ctx, daemon, (conf,)))


class TestStagingSettings:
    def test_reads_the_settings_block(self, tmp_path: Path) -> None:
        text = _staging_script(tmp_path / "s.lua", "/shared/scratch/%u/s").read_text()
        assert {"STAGING_BASE": "/shared/scratch/7/s", "CACHE_BASE": "/tmp/scrun-cache-7"} == \
            staging.staging_bases(text, 7)

    def test_cache_off(self, tmp_path: Path) -> None:
        text = _staging_script(tmp_path / "s.lua", cache="false").read_text()
        assert {"STAGING_BASE": "/tmp/scrun-staging-7"} == staging.staging_bases(text, 7)

    def test_the_shipped_script(self) -> None:
        """The script the project ships is recognised and its bases read."""
        text = (Path(__file__).resolve().parents[2] / "lua" / "scrun-staging.lua").read_text()
        bases = staging.staging_bases(text, 0)
        assert bases is not None
        assert ["CACHE_BASE", "STAGING_BASE"] == sorted(bases)

    def test_another_script(self) -> None:
        assert staging.staging_bases(LUA, 7) is None

    def test_not_a_string(self, tmp_path: Path) -> None:
        """A base computed in Lua, or empty, is read as unset."""
        text = STAGING_HEAD + 'local STAGING_BASE = os.getenv("X")\nlocal CACHE = false\n'
        assert {"STAGING_BASE": ""} == staging.staging_bases(text, 7)


def _staging_ctx(tmp_path: Path, script: Path, ctld_up: bool = True) -> Context:
    ctx = _ctx(tmp_path)
    ctx.lua_script = str(script)
    ctx.ctld_up = ctld_up
    return ctx


def _step_here(ctx: Context, hide: str = "") -> list[list[str]]:
    """ctx.run_probe runs the step's shell here (the node sees this machine's files),
    with `hide` standing for a directory the node does not see: its markers are looked
    for elsewhere.  Returns the argvs it ran."""
    ran: list[list[str]] = []

    def run_probe(argv: list[str], timeout_s: float) -> tuple[int, str]:
        ran.append(argv)
        args = argv[argv.index("/bin/sh"):]  # the node's shell, its PATH prologue first
        if hide:
            args = [a.replace(hide, hide + "-elsewhere") for a in args]
        res = subprocess.run(args, capture_output=True, text=True, check=False,
                             env={**os.environ, "SLURMD_NODENAME": "n1"})
        return res.returncode, res.stdout + res.stderr

    ctx.run_probe = run_probe  # type: ignore[method-assign]
    return ran


class TestStagingProbe:
    def test_no_staging_script(self, tmp_path: Path) -> None:
        ctx = _ctx(tmp_path)
        assert ("ok", "no staging script in use (see the scrun.lua check)") == \
            _said(staging.staging_base(ctx))
        ctx.lua_script = str(tmp_path / "other.lua")
        (tmp_path / "other.lua").write_text(LUA)
        assert ("ok", f"no staging script ({ctx.lua_script} is not scrun-staging.lua)") == \
            _said(staging.staging_base(ctx))

    def test_seen_from_the_node(self, tmp_path: Path) -> None:
        """The node sees the markers: ok, naming the node; the markers are gone after;
        one step, with a time limit and --immediate."""
        base = tmp_path / "shared" / "%u"
        (tmp_path / "shared").mkdir()
        ctx = _staging_ctx(tmp_path, _staging_script(tmp_path / "s.lua", str(base), "false"))
        ran = _step_here(ctx)
        said = str(base).replace("%u", str(os.getuid()))
        assert ("ok", f"STAGING_BASE {said}: seen from node n1") == \
            _said(staging.staging_base(ctx))
        assert [] == os.listdir(tmp_path / "shared")
        assert 1 == len(ran)
        assert {"--nodes=1", "--ntasks=1", "--time=1", "--immediate=10"} <= set(ran[0])

    def test_not_seen_from_the_node(self, tmp_path: Path) -> None:
        """A base the node does not see (its /tmp is its own): failed, saying so."""
        local = tmp_path / "local"
        local.mkdir()
        ctx = _staging_ctx(tmp_path, _staging_script(tmp_path / "s.lua", f"{local}/s-%u",
                                                     "false"))
        _step_here(ctx, hide=str(local))
        check = staging.staging_base(ctx)
        assert ("failed", f"not visible from node n1: STAGING_BASE {local}/s-{os.getuid()} "
                          f"(a marker made here in {local} is not there)") == _said(check)
        assert "shares" in check.fix
        assert [] == os.listdir(local)

    def test_cache_base_probed_too(self, tmp_path: Path) -> None:
        """With CACHE on, both bases are probed in the one step; the cache's not seen."""
        shared, local = tmp_path / "shared", tmp_path / "local"
        shared.mkdir()
        local.mkdir()
        ctx = _staging_ctx(tmp_path, _staging_script(tmp_path / "s.lua", f"{shared}/%u",
                                                     "true", f"{local}/c-%u"))
        ran = _step_here(ctx, hide=str(local))
        check = staging.staging_base(ctx)
        assert (1, "failed", f"not visible from node n1: CACHE_BASE {local}/c-{os.getuid()} "
                             f"(a marker made here in {local} is not there)") == \
            (len(ran), check.status, check.found)

    def test_no_cluster(self, tmp_path: Path) -> None:
        """slurmctld does not answer: it says it could not probe, and warns of a base on
        a machine's own disk."""
        ctx = _staging_ctx(tmp_path, _staging_script(tmp_path / "s.lua"), ctld_up=False)
        ran = _step_here(ctx)
        check = staging.staging_base(ctx)
        assert ("warning", [], True) == (check.status, ran,
                                         "could not probe from a node" in check.found)
        shared = _staging_ctx(tmp_path, _staging_script(tmp_path / "t.lua", "/shared/%u",
                                                        "false"), ctld_up=False)
        assert "skipped" == staging.staging_base(shared).status

    def test_step_fails(self, tmp_path: Path) -> None:
        """srun cannot run the step (no node free in time): could not probe, its line."""
        (tmp_path / "shared").mkdir()
        ctx = _staging_ctx(tmp_path, _staging_script(tmp_path / "s.lua",
                                                     f"{tmp_path}/shared/%u", "false"))
        ctx.run_probe = lambda argv, timeout_s: (  # type: ignore[method-assign]
            1, "srun: error: Unable to allocate resources: Immediate execution impossible")
        assert ("skipped", f"STAGING_BASE {tmp_path}/shared/{os.getuid()}: could not probe "
                           "from a node: srun: error: Unable to allocate resources: "
                           "Immediate execution impossible") == \
            _said(staging.staging_base(ctx))
        assert [] == os.listdir(tmp_path / "shared")

    def test_unset_base(self, tmp_path: Path) -> None:
        ctx = _staging_ctx(tmp_path, _staging_script(tmp_path / "s.lua", "", "false"))
        assert "failed" == staging.staging_base(ctx).status

    def test_unwritable_here(self, tmp_path: Path) -> None:
        """No marker can be made (the base's nearest directory, /proc, takes no file,
        even from root)."""
        ctx = _staging_ctx(tmp_path, _staging_script(tmp_path / "s.lua", "/proc/x/%u",
                                                     "false"))
        assert "failed" == staging.staging_base(ctx).status
