"""What a caller and a container's config.json may steer: the [trust] table of
scrun-py.toml, and the rule for config.json's environment.  Pure, apart from `load`.

    [trust]
    site_files = "system"       # scrun-py.toml and scrun.lua from the system's slurm.conf
                                # directory, whatever slurm.conf the caller names
    lua_override = false        # SCRUN_PY_LUA (another scrun.lua) is refused
    container_env = ["SLURM_JOB_ID"]   # more names config.json's process.env may set

`site_files` and `lua_override` are read from the system's file only
(/etc/slurm/scrun-py.toml, next to the compiled-in default slurm.conf whether or not that
exists: a caller's -f, SLURM_CONF or PATH does not move it); `container_env` from the
file in use (the system's, too, on a configless node: site/site_conf.py).
docs/security.md explains the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scrun_py.base import flags
from scrun_py.base.layout import TRUST_KEYS
from scrun_py.base.records import NamedTuple
from scrun_py.slurm.options import SCRUN_OPTIONS

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:  # create uses the default rule without reading a site file

    from scrun_py.site.site_conf import SiteConf

LUA_OVERRIDE_ENV = "SCRUN_PY_LUA"
# SCRUN_* options whose value is a program srun runs (on the login node, or on the node
# before the container): an image must not choose what runs outside its container
PROGRAM_OPTIONS = ("SCRUN_PROLOG", "SCRUN_EPILOG", "SCRUN_TASK_PROLOG", "SCRUN_TASK_EPILOG")
# What config.json's process.env may set for scrun-py and the Slurm commands it runs:
# the job options of scrun(1) but those naming programs, the diagnostics levels, the
# allocation timeout, and the options of the site's SPANK plugins (input to the site's
# own code, as a job option is).  No other SLURM_* variable: those steer salloc and srun
# themselves (SLURM_CONF their configuration, SLURM_JOB_ID the job to attach to,
# SLURM_PROLOG a program to run), unless the site lists them in container_env.
CONTAINER_ENV: frozenset[str] = frozenset(
    {*(set(SCRUN_OPTIONS) - set(PROGRAM_OPTIONS)), *flags.LEVEL_ENV, "SCRUN_PY_ALLOC_TIMEOUT"})
CONTAINER_ENV_PREFIXES = ("SLURM_SPANK__SLURM_SPANK_OPTION_",)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class Trust(NamedTuple):
    site_files: str = "any"
    lua_override: bool = True
    container_env: frozenset[str] = CONTAINER_ENV

    def split_env(self, entries: Iterable[str]) -> tuple[dict[str, str], list[str]]:
        """(imported, refused) of config.json's process.env: the SCRUN_*/SLURM_* entries
        that may steer scrun-py and Slurm, and the names of those that may not.  Other
        entries (PATH, HOME, …) are the container's only and are neither."""
        imported: dict[str, str] = {}
        refused: list[str] = []
        for entry in entries:
            name, sep, value = entry.partition("=")
            if not (sep and name.startswith(("SCRUN_", "SLURM_"))):
                continue
            if name in self.container_env or name.startswith(CONTAINER_ENV_PREFIXES):
                imported[name] = value
            elif name not in refused:
                refused.append(name)
        return imported, refused


def refused_warning(name: str) -> str:
    return (f"{name} in config.json's process.env is not used by scrun-py or Slurm: only "
            "the site's [trust] container_env may allow it (the container still sees it)")


def _names(site: SiteConf, value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(
            isinstance(v, str) and v and set(v) <= _NAME_CHARS for v in value):
        raise site.error("trust", "container_env",
                         "must be a list of variable names (A-Z, 0-9, _)")
    return frozenset(value)


def parse(site: SiteConf) -> Trust:
    table = site.section("trust", TRUST_KEYS)
    system = site.system_trust
    lua = [t.get("lua_override", True) for t in (system, table)]
    if not all(isinstance(v, bool) for v in lua):
        raise site.error("trust", "lua_override", "must be true or false")
    extra = _names(site, table.get("container_env", []))
    return Trust(site_files=str(system.get("site_files", "any")), lua_override=all(lua),
                 container_env=CONTAINER_ENV | extra)


def check_lua_override(trust: Trust, environ: Mapping[str, str], site: SiteConf) -> None:
    """A ConfigError when SCRUN_PY_LUA is set and the site forbids it."""
    from scrun_py.base.errors import ConfigError

    if not trust.lua_override and environ.get(LUA_OVERRIDE_ENV):
        where = (site.system_path if site.system_trust.get("lua_override") is False
                 else site.path)
        raise ConfigError(f"{LUA_OVERRIDE_ENV} is not allowed here: {where} sets "
                          "[trust] lua_override = false")
