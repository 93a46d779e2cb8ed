"""base/conf_lookup.py: slurm.conf found in Slurm's clients' order (-f, SLURM_CONF, the
compiled-in default or the prefix's of PATH's srun, the configless copy), each rule with
temporary files standing for /etc/slurm and /run/slurm/conf; and what follows from the
choice: where oci.conf's "not found" says it looked, which scrun-py.toml and scrun.lua
apply on a configless node (site/site_conf.py)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrun_py.base import conf_lookup, layout
from scrun_py.base.conf_lookup import Choice, find
from scrun_py.base.errors import OciConfError
from scrun_py.base.invocation import Invocation
from scrun_py.site import site_conf
from scrun_py.site.oci_conf_syntax import missing_text, read_text


class Site:
    """tmp_path/etc/slurm standing for /etc/slurm, tmp_path/run/slurm/conf for the
    configless copies, and an empty PATH (no srun)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.etc = tmp_path / "etc" / "slurm"
        self.run = tmp_path / "run" / "slurm" / "conf"
        self.etc.mkdir(parents=True)
        self.run.parent.mkdir(parents=True)
        monkeypatch.setattr(layout, "DEFAULT_SLURM_CONF", str(self.etc / "slurm.conf"))
        monkeypatch.setattr(layout, "CONFIGLESS_SLURM_CONF", str(self.run / "slurm.conf"))
        monkeypatch.delenv("SLURM_CONF", raising=False)
        self.tmp = tmp_path
        self.env: dict[str, str] = {"PATH": str(tmp_path / "nobin")}

    def sackd(self, *names: str) -> Path:
        """The configless copies sackd writes (a directory of files)."""
        self.run.mkdir(exist_ok=True)
        for name in ("slurm.conf", *names):
            (self.run / name).write_text(f"# {name}\n")
        return self.run / "slurm.conf"

    def system(self, *names: str) -> Path:
        for name in ("slurm.conf", *names):
            (self.etc / name).write_text(f"# {name}\n")
        return self.etc / "slurm.conf"

    def prefix(self, name: str = "opt") -> tuple[Path, Path]:
        """A Slurm installed with --prefix tmp/<name>: (its srun, its etc/slurm.conf)."""
        bindir = self.tmp / name / "bin"
        bindir.mkdir(parents=True)
        srun = bindir / "srun"
        srun.write_text("#!/bin/sh\n")
        srun.chmod(0o755)
        self.env["PATH"] = f"{bindir}:{self.env['PATH']}"
        return srun, self.tmp / name / "etc" / "slurm.conf"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    return Site(tmp_path, monkeypatch)


class TestOrder:
    def test_option_first_even_when_missing(self, site: Site) -> None:
        """-f wins over everything, and is taken as it is (Slurm does not check it)."""
        site.system()
        site.sackd()
        site.env["SLURM_CONF"] = str(site.system())
        choice = find(str(site.tmp / "mine.conf"), site.env)
        assert (str(site.tmp / "mine.conf"), conf_lookup.OPTION) == (choice.path, choice.rule)
        assert "named by -f" == choice.origin()

    def test_relative_option_made_absolute(self, site: Site,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(site.tmp)
        assert str(site.tmp / "x.conf") == find("x.conf", site.env).path

    def test_slurm_conf_second_even_when_missing(self, site: Site) -> None:
        """SLURM_CONF comes before the default and the configless copy, missing or not."""
        site.system()
        site.sackd()
        site.env["SLURM_CONF"] = str(site.tmp / "gone.conf")
        choice = find(None, site.env)
        assert (str(site.tmp / "gone.conf"), conf_lookup.ENV, "named by SLURM_CONF") == \
            (choice.path, choice.rule, choice.origin())

    def test_empty_slurm_conf_is_unset(self, site: Site) -> None:
        conf = site.system()
        site.env["SLURM_CONF"] = ""
        choice = find(None, site.env)
        assert (str(conf), conf_lookup.DEFAULT) == (choice.path, choice.rule)

    def test_compiled_default_before_configless(self, site: Site) -> None:
        """With both, the compiled-in default (Slurm: the default iff it exists)."""
        conf = site.system()
        site.sackd()
        choice = find(None, site.env)
        assert (str(conf), conf_lookup.DEFAULT, "the compiled-in default") == \
            (choice.path, choice.rule, choice.origin())

    def test_configless_copy_of_sackd(self, site: Site) -> None:
        """No /etc/slurm/slurm.conf: the configless copy, said to be sackd's (a
        directory)."""
        conf = site.sackd("oci.conf", "scrun.lua")
        choice = find(None, site.env)
        assert (str(conf), conf_lookup.CONFIGLESS) == (choice.path, choice.rule)
        assert "configless copy, written by sackd" == choice.origin()

    def test_configless_copy_of_slurmd(self, site: Site) -> None:
        """slurmd's /run/slurm/conf is a link to its conf-cache."""
        cache = site.tmp / "spool" / "conf-cache"
        cache.mkdir(parents=True)
        (cache / "slurm.conf").write_text("#\n")
        site.run.symlink_to(cache)
        choice = find(None, site.env)
        assert (conf_lookup.CONFIGLESS, "configless copy, slurmd's conf-cache") == \
            (choice.rule, choice.origin())

    def test_prefix_of_paths_srun_first(self, site: Site) -> None:
        """PATH's srun in P/bin and P/etc/slurm.conf there: that file, before
        /etc/slurm/slurm.conf (it is what that srun reads)."""
        site.system()
        srun, conf = site.prefix()
        conf.parent.mkdir()
        conf.write_text("#\n")
        choice = find(None, site.env)
        assert (str(conf), conf_lookup.PREFIX, str(srun)) == \
            (choice.path, choice.rule, choice.srun)
        assert f"the compiled-in default of {srun}" == choice.origin()

    def test_prefix_through_a_link(self, site: Site) -> None:
        """A srun on PATH that links into P/bin: P's file."""
        srun, conf = site.prefix()
        conf.parent.mkdir()
        conf.write_text("#\n")
        links = site.tmp / "links"
        links.mkdir()
        (links / "srun").symlink_to(srun)
        site.env["PATH"] = str(links)
        assert str(conf) == find(None, site.env).path

    def test_prefix_without_its_file_falls_through(self, site: Site) -> None:
        """P/etc/slurm.conf missing: the next rules, and the place is in the list."""
        srun, conf = site.prefix()
        sackd = site.sackd()
        choice = find(None, site.env)
        assert (str(sackd), conf_lookup.CONFIGLESS) == (choice.path, choice.rule)
        assert f"{conf} (the prefix of {srun})" in choice.looked

    def test_usr_bin_srun_is_the_packages(self, site: Site,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        """/usr/bin/srun is a package's, which reads /etc/slurm: /usr/etc is not looked at."""
        monkeypatch.setattr(conf_lookup, "_on_path", lambda name, env: "/usr/bin/srun")
        monkeypatch.setattr(os.path, "realpath", lambda p: p)
        assert conf_lookup.srun_prefix_conf(site.env) is None

    def test_relative_path_entry_skipped(self, site: Site,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
        """A relative PATH entry is never searched (procs.resolve_program's rule)."""
        srun, conf = site.prefix()
        conf.parent.mkdir()
        conf.write_text("#\n")
        monkeypatch.chdir(srun.parent)
        site.env["PATH"] = "."
        assert conf_lookup.NONE == find(None, site.env).rule

    def test_nothing_found_names_every_place(self, site: Site) -> None:
        """No file anywhere: the compiled default as the path, and one line naming -f,
        SLURM_CONF, the prefix's file, /etc/slurm/slurm.conf and /run/slurm/conf."""
        srun, conf = site.prefix()
        choice = find(None, site.env)
        assert (str(site.etc / "slurm.conf"), conf_lookup.NONE, False) == \
            (choice.path, choice.rule, choice.found)
        assert ("no slurm.conf found (looked at -f (not given), SLURM_CONF (not set), "
                f"{conf} (the prefix of {srun}), {site.etc / 'slurm.conf'}, "
                f"{site.run / 'slurm.conf'}); name one with -f or SLURM_CONF") == \
            choice.not_found()


class TestInvocation:
    def test_slurm_conf_file_follows_the_lookup(self, site: Site,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
        """Without -f, the Invocation's slurm.conf is the lookup's (the configless copy
        here); with -f, -f's."""
        monkeypatch.setenv("PATH", site.env["PATH"])
        conf = site.sackd()
        inv = Invocation(root_dir=str(site.tmp / "root"))
        assert (str(conf), conf_lookup.CONFIGLESS) == \
            (inv.slurm_conf_file(), inv.slurm_conf_choice().rule)
        inv = Invocation.resolve(root=site.tmp, slurm_conf=site.tmp / "f.conf")
        assert str(site.tmp / "f.conf") == inv.slurm_conf_file()


class TestSystemConf:
    def test_caller_cannot_move_it(self, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
        """SLURM_CONF and PATH's srun do not change the system's slurm.conf."""
        _srun, conf = site.prefix()
        conf.parent.mkdir()
        conf.write_text("#\n")
        monkeypatch.setenv("SLURM_CONF", str(conf))
        monkeypatch.setenv("PATH", site.env["PATH"])
        sackd = site.sackd()
        assert Choice(str(sackd), conf_lookup.CONFIGLESS,
                      (str(site.etc / "slurm.conf"), str(sackd))) == conf_lookup.system_conf()
        system = site.system()
        assert str(system) == conf_lookup.system_conf().path

    def test_in_configless_dir(self, site: Site) -> None:
        """By real path: a link to the configless directory counts, a look-alike does not."""
        conf = site.sackd()
        link = site.tmp / "link"
        link.symlink_to(site.run)
        assert (True, True, False) == (conf_lookup.in_configless_dir(conf),
                                       conf_lookup.in_configless_dir(link / "slurm.conf"),
                                       conf_lookup.in_configless_dir(site.etc / "slurm.conf"))


class TestOciConfNotFound:
    def test_nothing_found(self, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
        """No slurm.conf anywhere: the error names every place looked at."""
        monkeypatch.setenv("PATH", site.env["PATH"])
        with pytest.raises(OciConfError) as info:
            read_text(str(site.etc / "oci.conf"))
        assert ("oci.conf: not found: it is read beside slurm.conf, and no slurm.conf "
                "found (looked at -f (not given), SLURM_CONF (not set), "
                f"{site.etc / 'slurm.conf'}, {site.run / 'slurm.conf'}); name one with -f "
                "or SLURM_CONF") == str(info.value)

    def test_configless_copy_without_oci_conf(self, site: Site) -> None:
        """The configless copy has no oci.conf: the controller had none to ship."""
        site.sackd()
        assert (f"oci.conf: not found: {site.run / 'oci.conf'} (it is read beside "
                f"{site.run / 'slurm.conf'}, the slurm.conf in use, a configless copy: "
                "slurmctld ships oci.conf with it when its own configuration directory has "
                "one (Slurm 23.11+); name another slurm.conf with -f or SLURM_CONF)") == \
            missing_text(str(site.run / "oci.conf"))

    def test_named_file_missing(self, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
        """SLURM_CONF names a file that is not there: that file, and how to name another."""
        monkeypatch.setenv("SLURM_CONF", str(site.tmp / "x" / "slurm.conf"))
        assert (f"oci.conf: not found: {site.tmp / 'x' / 'oci.conf'} (it is read beside "
                f"the slurm.conf in use, and {site.tmp / 'x' / 'slurm.conf'} is missing too; "
                "name another slurm.conf with -f or SLURM_CONF)") == \
            missing_text(str(site.tmp / "x" / "oci.conf"))


class TestSiteFileOnAConfiglessNode:
    """sackd never ships scrun-py.toml: on a configless node the system's file applies,
    and scrun.lua is sackd's copy."""

    def test_system_file_applies(self, site: Site) -> None:
        conf = site.sackd("scrun.lua")
        (site.etc / "scrun-py.toml").write_text('[policy]\nno_new_privileges = true\n')
        loaded = site_conf.load(conf)
        assert (site.etc / "scrun-py.toml", site.run) == (loaded.path, loaded.directory)
        assert {"policy": {"no_new_privileges": True}} == loaded.data

    def test_system_file_even_without_etc_slurm_conf(self, site: Site) -> None:
        """/etc/slurm holds no slurm.conf; its scrun-py.toml is still the system's."""
        conf = site.sackd()
        (site.etc / "scrun-py.toml").write_text("[trust]\nlua_override = false\n")
        assert site.etc / "scrun-py.toml" == site_conf.load(conf).path

    def test_a_copy_beside_the_configless_copy_is_not_read(self, site: Site) -> None:
        conf = site.sackd("scrun-py.toml")
        assert site.etc / "scrun-py.toml" == site_conf.load(conf).path

    def test_pinned_lua_is_sackds(self, site: Site) -> None:
        """site_files = "system" on a configless node: the caller's -f moves neither the
        site file nor scrun.lua, which is the configless copy's."""
        site.sackd("scrun.lua")
        (site.etc / "scrun-py.toml").write_text('[trust]\nsite_files = "system"\n')
        mine = site.tmp / "mine"
        mine.mkdir()
        (mine / "scrun-py.toml").write_text("")
        loaded = site_conf.load(mine / "slurm.conf")
        assert (site.etc / "scrun-py.toml", site.run) == (loaded.path, loaded.directory)

    def test_pinned_lua_beside_etc_slurm_conf(self, site: Site) -> None:
        """With /etc/slurm/slurm.conf, the pinned scrun.lua stays in /etc/slurm."""
        site.system()
        site.sackd()
        (site.etc / "scrun-py.toml").write_text('[trust]\nsite_files = "system"\n')
        assert site.etc == site_conf.load(site.tmp / "slurm.conf").directory

    def test_callers_own_file_elsewhere(self, site: Site) -> None:
        """Not pinned, a slurm.conf the caller names elsewhere keeps its own site file
        (the rule the system's [trust] site_files exists to close)."""
        site.sackd()
        mine = site.tmp / "mine"
        mine.mkdir()
        assert (mine / "scrun-py.toml", mine) == (site_conf.load(mine / "slurm.conf").path,
                                                  site_conf.load(mine / "slurm.conf").directory)


class TestAnchorEnvironment:
    def test_salloc_gets_the_chosen_slurm_conf(self, tmp_path: Path, fake: object,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
        """The environment the anchor gives salloc and the hooks names the slurm.conf
        create chose (here as if found configless), whatever the anchor's own says; the
        anchor's process environment is left as it was."""
        from scrun_py.anchor import __main__ as anchor_main
        from tests.unit.anchor_child import make_spec
        from tests.unit.anchor_harness import quiet_logger

        monkeypatch.setenv("SLURM_CONF", str(tmp_path / "caller.conf"))
        spec = make_spec(tmp_path, -1)._replace(slurm_conf="/run/slurm/conf/slurm.conf")
        lc = anchor_main._prepare(spec, quiet_logger())
        assert ("/run/slurm/conf/slurm.conf", str(tmp_path / "caller.conf")) == \
            (lc.container.environ["SLURM_CONF"], os.environ["SLURM_CONF"])
