"""Which slurm.conf scrun-py reads, found as Slurm's client commands find theirs, and
every place it looked.  os alone: the verbs that audit ask (base/lean.py).

Slurm's order (read_config.c `_establish_config_source`, read in 25.11 and 26.05):

1. the file the command is given (scrun-py: `-f`), and 2. `$SLURM_CONF`, both taken as
   they are, whether or not the file exists;
3. the compiled-in default (`$(sysconfdir)/slurm.conf`), if it exists;
4. `/run/slurm/conf/slurm.conf`, if it exists: the configless copy (slurmd links
   /run/slurm/conf to its conf-cache; sackd writes its copies there).  sackd writes to
   `$RUNTIME_DIRECTORY/conf` instead when that is set, but the clients never look there:
   a login node with such a sackd needs SLURM_CONF, for Slurm's commands as for scrun-py.
Past that, Slurm's clients fetch the files into memory from `$SLURM_CONF_SERVER` or a
DNS SRV record; scrun-py has no such copy to read oci.conf from, and says where it
looked.

scrun-py's own compiled-in default is /etc/slurm/slurm.conf (that of the Debian and RHEL
packages).  A Slurm built with `--prefix P` reads `P/etc/slurm.conf` instead, so before
it comes the default of the srun scrun-py runs: `P/etc/slurm.conf` when PATH's srun is
`P/bin/srun` (symbolic links followed) and that file exists (not for /usr/bin/srun:
the packages that install it read /etc/slurm/slurm.conf).  PATH is the caller's, as
SLURM_CONF is: neither moves the system's site file (`system_conf`, site/site_conf.py).
"""

from __future__ import annotations

import os

from scrun_py.base import layout

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Choice", "find", "in_configless_dir", "system_conf"]

#: the rules, in the order they are tried
OPTION, ENV, PREFIX, DEFAULT, CONFIGLESS, NONE = (
    "-f", "SLURM_CONF", "srun's prefix", "compiled default", "configless copy", "none")


class Choice:
    """The slurm.conf in use (`path`: the compiled default when none was found), the
    rule that chose it, and the places looked at, in order, each as a short phrase.
    A plain class: base/records.py's NamedTuple imports operator, which `delete` does
    without (it asks which slurm.conf is in use for its audit record)."""

    __slots__ = ("looked", "path", "rule", "srun")

    def __init__(self, path: str, rule: str, looked: tuple[str, ...] = (),
                 srun: str = "") -> None:
        self.path, self.rule, self.looked = path, rule, looked
        self.srun = srun  # the srun whose prefix gave the file (rule PREFIX)

    def __repr__(self) -> str:
        return f"Choice({self.path!r}, {self.rule!r}, {self.looked!r}, {self.srun!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Choice) and (self.path, self.rule, self.looked, self.srun) \
            == (other.path, other.rule, other.looked, other.srun)

    __hash__ = None  # type: ignore[assignment]

    @property
    def found(self) -> bool:
        return self.rule != NONE

    def origin(self) -> str:
        """Where the file came from, for doctor's table: `named by -f`, …"""
        if self.rule in (OPTION, ENV):
            return f"named by {self.rule}"
        if self.rule == PREFIX:
            return f"the compiled-in default of {self.srun}"
        if self.rule == DEFAULT:
            return "the compiled-in default"
        if self.rule == CONFIGLESS:
            return "configless copy, " + configless_writer(os.path.dirname(self.path))
        return "none found"

    def not_found(self) -> str:
        """The sentence for no slurm.conf found: every place looked at."""
        return ("no slurm.conf found (looked at " + ", ".join(self.looked) +
                "); name one with -f or SLURM_CONF")


def configless_writer(directory: str) -> str:
    """Who keeps the configless copies in `directory`: slurmd links it to its
    conf-cache, sackd writes a directory."""
    return "slurmd's conf-cache" if os.path.islink(directory) else "written by sackd"


def srun_prefix_conf(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(P/etc/slurm.conf, P/bin/srun) when PATH's srun is P/bin/srun, else None."""
    srun = _on_path("srun", environ)
    if srun is None:
        return None
    srun = os.path.realpath(srun)
    bindir = os.path.dirname(srun)
    if os.path.basename(bindir) != "bin" or bindir == "/usr/bin":
        return None  # packages install /usr/bin/srun and set /etc/slurm
    return os.path.join(os.path.dirname(bindir), "etc", "slurm.conf"), srun


def _on_path(name: str, environ: Mapping[str, str]) -> str | None:
    """The program `name` as procs.resolve_program finds it (absolute PATH entries
    only), without its import: procs imports subprocess, and the pure site/ modules
    reach this one through site_conf."""
    for entry in environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(entry, name)
        if os.path.isabs(entry) and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def find(option: str | None, environ: Mapping[str, str]) -> Choice:
    """The slurm.conf in use for `-f option` (None: not given) and `environ`."""
    if option is not None:
        return Choice(os.path.abspath(option), OPTION, ("-f",))
    env = environ.get("SLURM_CONF")
    if env:  # an empty SLURM_CONF is no SLURM_CONF (Slurm would fail on "")
        return Choice(os.path.abspath(env), ENV, ("-f (not given)", "SLURM_CONF"))
    looked: tuple[str, ...] = ("-f (not given)", "SLURM_CONF (not set)")
    prefixed = srun_prefix_conf(environ)
    if prefixed is not None and prefixed[0] != layout.DEFAULT_SLURM_CONF:
        conf, srun = prefixed
        if os.path.exists(conf):
            return Choice(conf, PREFIX, (*looked, conf), srun)
        looked = (*looked, f"{conf} (the prefix of {srun})")
    return _system_files(looked)


def system_conf() -> Choice:
    """The slurm.conf found without the caller's -f, SLURM_CONF or PATH: the compiled
    default, else the configless copy (each only if it exists).  Both are root's to
    write; its directory is where the system's scrun.lua is (site/site_conf.py)."""
    return _system_files(())


def _system_files(looked: tuple[str, ...]) -> Choice:
    """Rules 3 and 4: the compiled-in default, then the configless copy."""
    for path, rule in ((layout.DEFAULT_SLURM_CONF, DEFAULT),
                       (layout.CONFIGLESS_SLURM_CONF, CONFIGLESS)):
        looked = (*looked, path)
        if os.path.exists(path):
            return Choice(path, rule, looked)
    return Choice(layout.DEFAULT_SLURM_CONF, NONE, looked)


def in_configless_dir(slurm_conf: str | os.PathLike[str]) -> bool:
    """Whether `slurm_conf` is in the directory of the configless copies (by its real
    path: slurmd's /run/slurm/conf is a link).  That directory never has a scrun-py.toml:
    sackd and slurmd copy only Slurm's own files."""
    here = os.path.realpath(os.path.dirname(os.fspath(slurm_conf)))
    return here == os.path.realpath(os.path.dirname(layout.CONFIGLESS_SLURM_CONF))
