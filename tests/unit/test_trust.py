"""Unit tests for scrun_py.site.trust and the system site file of
scrun_py.site.site_conf: what a caller's -f/SLURM_CONF/SCRUN_PY_LUA and an image's
environment may steer on a shared host."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from pathlib import Path

import pytest

from scrun_py.base.errors import ConfigError
from scrun_py.hooks.interface import NoHooks, load_hooks
from scrun_py.hooks.lua import LuaHooks
from scrun_py.site import site_conf, trust
from scrun_py.slurm.options import SCRUN_OPTIONS

# Every variable an image's ENV (or `docker run -e`) may not use to steer scrun-py or
# Slurm on the login node, with what it would do there.
REFUSED = {
    "SLURM_CONF": "another slurm.conf for salloc/srun (its plugins, its controller)",
    "SLURM_JOB_ID": "attach the container to an existing job",
    "SLURM_JOBID": "the older name of SLURM_JOB_ID",
    "SLURM_PROLOG": "srun --prolog: a program srun runs on the login node",
    "SLURM_EPILOG": "srun --epilog: likewise",
    "SLURM_TASK_PROLOG": "srun --task-prolog: a program run on the node outside the container",
    "SLURM_TASK_EPILOG": "srun --task-epilog: likewise",
    "SLURM_CONTAINER": "srun --container: another bundle",
    "SLURM_EXPORT_ENV": "what srun passes to the task",
    "SLURM_DEBUG": "srun's own verbosity",
    "SCRUN_PROLOG": "srun --prolog through the scrun(1) table",
    "SCRUN_EPILOG": "srun --epilog through the scrun(1) table",
    "SCRUN_TASK_PROLOG": "srun --task-prolog through the scrun(1) table",
    "SCRUN_TASK_EPILOG": "srun --task-epilog through the scrun(1) table",
    "SCRUN_PY_LUA": "another scrun.lua (read from the caller's environment only)",
    "SCRUN_PY_ON_ABANDON": "the anchor's abandon script",
    "SCRUN_LOG_FILE": "a log path",
}


def _site(tmp_path: Path, mine: str = "", system: str | None = None) -> site_conf.SiteConf:
    conf = tmp_path / "mine" / "slurm.conf"
    conf.parent.mkdir(exist_ok=True)
    if mine:
        (conf.parent / "scrun-py.toml").write_text(mine)
    sysdir = tmp_path / "system"
    sysdir.mkdir(exist_ok=True)
    if system is not None:
        (sysdir / "scrun-py.toml").write_text(system)
    return site_conf.load(conf, sysdir / "scrun-py.toml")


class TestContainerEnv:
    @pytest.mark.parametrize("name", sorted(REFUSED))
    def test_refused(self, name: str) -> None:
        """Each variable that would steer Slurm or scrun-py from outside the container is
        refused by default (and reported by name)."""
        imported, refused = trust.Trust().split_env([f"{name}=/tmp/x", "SCRUN_QOS=low"])
        assert ({"SCRUN_QOS": "low"}, [name]) == (imported, refused)

    def test_default_rule(self) -> None:
        """Allowed: the scrun(1) job options but the four that name programs, the
        diagnostics levels, the allocation timeout; no SLURM_* name."""
        assert set(SCRUN_OPTIONS) - set(trust.PROGRAM_OPTIONS) <= trust.CONTAINER_ENV
        assert {"SCRUN_DEBUG", "SCRUN_STDERR_DEBUG", "SCRUN_PY_ALLOC_TIMEOUT"} <= (
            trust.CONTAINER_ENV)
        assert [] == sorted(n for n in trust.CONTAINER_ENV if n.startswith("SLURM_"))
        assert not any(n.startswith(trust.CONTAINER_ENV_PREFIXES) for n in REFUSED)
        assert [] == sorted(set(REFUSED) & trust.CONTAINER_ENV)

    def test_spank_options_allowed(self) -> None:
        """The options of the site's SPANK plugins are job options (docs/spank.md)."""
        name = "SLURM_SPANK__SLURM_SPANK_OPTION_scrun_tag_scrun_tag"
        assert ({name: "blue"}, ["SLURM_SPANK_X"]) == trust.Trust().split_env(
            [f"{name}=blue", "SLURM_SPANK_X=1"])

    def test_other_variables_are_the_containers(self) -> None:
        """PATH, HOME, … are neither imported nor reported: they are the container's."""
        assert ({}, []) == trust.Trust().split_env(["PATH=/x", "HOME=/", "NOEQUALS",
                                                    "SLURMX=1"])

    def test_site_allows_more(self, tmp_path: Path) -> None:
        t = trust.parse(_site(tmp_path, '[trust]\ncontainer_env = ["SLURM_JOB_ID"]\n'))
        assert ({"SLURM_JOB_ID": "5"}, ["SLURM_CONF"]) == t.split_env(
            ["SLURM_JOB_ID=5", "SLURM_CONF=/x"])

    @pytest.mark.parametrize("value", ['"SLURM_JOB_ID"', '["slurm_job_id"]', '[""]', "[1]"])
    def test_bad_container_env(self, tmp_path: Path, value: str) -> None:
        with pytest.raises(ConfigError, match=r"\[trust\] container_env: must be a list"):
            trust.parse(_site(tmp_path, f"[trust]\ncontainer_env = {value}\n"))


class TestSystemFile:
    def test_foreign_file_used_unless_pinned(self, tmp_path: Path) -> None:
        """The file next to the caller's slurm.conf is used; with the system's file
        saying site_files = "system", the system's file is, whatever -f names."""
        site = _site(tmp_path, "[audit]\nsyslog = false\n", "[policy]\n")
        assert tmp_path / "mine" / "scrun-py.toml" == site.path
        site = _site(tmp_path, "[audit]\nsyslog = false\n",
                     '[trust]\nsite_files = "system"\n[policy]\nreadonly_rootfs = true\n')
        assert tmp_path / "system" / "scrun-py.toml" == site.path
        assert tmp_path / "system" == site.directory
        assert {"readonly_rootfs": True} == site.section("policy", ("readonly_rootfs",))

    def test_system_typo_is_an_error(self, tmp_path: Path) -> None:
        """A misspelt key in the system's [trust] fails whatever file is in use (else
        the setting would be silently off)."""
        with pytest.raises(ConfigError, match=r"system/scrun-py.toml: \[trust\]: unknown key "
                                              r"lua_overide$"):
            _site(tmp_path, "[audit]\n", "[trust]\nlua_overide = false\n")

    def test_bad_site_files(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r'site_files: must be "any" or "system"'):
            _site(tmp_path, system='[trust]\nsite_files = "mine"\n')

    def test_lua_override_from_the_system_file(self, tmp_path: Path) -> None:
        """lua_override = false in the system's file holds whatever file is in use; a
        foreign file cannot turn it back on."""
        site = _site(tmp_path, "[trust]\nlua_override = true\n",
                     "[trust]\nlua_override = false\n")
        t = trust.parse(site)
        assert t.lua_override is False
        with pytest.raises(ConfigError, match=r"^SCRUN_PY_LUA is not allowed here: "
                                              r".*/system/scrun-py.toml sets \[trust\] "
                                              r"lua_override = false$"):
            trust.check_lua_override(t, {"SCRUN_PY_LUA": "/tmp/mine.lua"}, site)
        trust.check_lua_override(t, {"SCRUN_PY_LUA": ""}, site)  # unset, in effect
        trust.check_lua_override(trust.parse(_site(tmp_path, "", "")),
                                 {"SCRUN_PY_LUA": "/tmp/mine.lua"}, site)

    def test_no_system_file(self, tmp_path: Path) -> None:
        assert trust.Trust() == trust.parse(_site(tmp_path))


class TestHooksDirectory:
    def test_site_dir_and_no_override(self, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        """With site_dir, scrun.lua comes from there, not from next to slurm.conf; with
        override "", SCRUN_PY_LUA is not read."""
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "scrun.lua").write_text(
            "function slurm_scrun_stage_in(...) return slurm.SUCCESS end\n"
            "function slurm_scrun_stage_out(...) return slurm.SUCCESS end\n"
            "return slurm.SUCCESS\n")
        (tmp_path / "system").mkdir()
        monkeypatch.setenv("SCRUN_PY_LUA", str(tmp_path / "mine" / "scrun.lua"))
        conf = tmp_path / "mine" / "slurm.conf"
        assert isinstance(load_hooks(conf, override="", site_dir=tmp_path / "system"),
                          NoHooks)
        assert isinstance(load_hooks(conf, site_dir=tmp_path / "system"), LuaHooks)
