"""doctor's checks of the site's files beside slurm.conf: scrun.lua and scrun-py.toml."""

from __future__ import annotations

import os

from scrun_py.base.errors import ScrunError
from scrun_py.commands.doctor.context import Context
from scrun_py.commands.doctor.report import FAIL, OK, WARN, Check

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.site import site_conf


def scrun_lua(ctx: Context) -> Check:
    """scrun.lua loads where `create` looks for it and defines both hooks (none is only
    a warning)."""
    from scrun_py.hooks.interface import NoHooks, load_hooks
    from scrun_py.site import site_conf, trust

    if ctx.conf_problem:
        return ctx.needs_conf("scrun.lua", "it is found next to slurm.conf")
    site: site_conf.SiteConf | None = None
    try:  # where create looks (a broken site file is the scrun-py.toml check's)
        site = site_conf.load(ctx.slurm_conf)
        site_trust = trust.parse(site)
    except ScrunError:
        site = None
    try:
        if site is not None:
            trust.check_lua_override(site_trust, os.environ, site)
        hooks = load_hooks(ctx.slurm_conf, site_dir=site.directory if site else None)
    except ScrunError as exc:
        return Check("scrun.lua", FAIL, str(exc), "fix the script (docs/hooks.md)")
    directory = site.directory if site is not None else ctx.slurm_conf.parent
    if isinstance(hooks, NoHooks):
        return Check("scrun.lua", WARN, f"none ({directory / 'scrun.lua'} not found): "
                     "stage_in/stage_out are no-ops",
                     "bundles must then be on a filesystem the compute nodes share; "
                     "see lua/")
    script = str(getattr(hooks, "script", "scrun.lua"))
    hooks.close()
    ctx.lua_script = script
    if os.environ.get(trust.LUA_OVERRIDE_ENV):
        origin = f"named by {trust.LUA_OVERRIDE_ENV}"
    elif site is not None and site.lua_dir is not None and \
            site.system_trust.get("site_files") == "system":
        origin = "the system's: [trust] site_files pins it"
    else:
        origin = "beside slurm.conf"
    return Check("scrun.lua", OK, f"{script} ({origin}): loads, both hooks defined")


def site_file(ctx: Context) -> Check:
    """scrun-py.toml parses and its tables are valid; says which audit sinks, policy
    rules and [trust] pins are on."""
    from scrun_py.site import audit, policy, site_conf, trust

    if ctx.conf_problem:
        return ctx.needs_conf("scrun-py.toml", "it is found next to slurm.conf")
    try:
        site = site_conf.load(ctx.slurm_conf)
        audit_settings = audit.load_settings(ctx.slurm_conf, site)
        rules = policy.load_policy(site)
        site_trust = trust.parse(site)
    except ScrunError as exc:
        return Check("scrun-py.toml", FAIL, str(exc), "fix the file (docs/policy.md, "
                     "docs/audit.md): every create fails until then")
    where = f"{site.path} ({site_origin(ctx, site)})"
    if not site.data:
        return Check("scrun-py.toml", OK, f"{where}: none (no audit trail, no policy)")
    sinks = [name for name, on in (("file", bool(audit_settings.file)),
                                   ("syslog", audit_settings.syslog)) if on]
    audit_part = f"audit to {' and '.join(sinks)}" if sinks else "no audit trail"
    set_rules = [k for k in policy.KEYS if k in site.data.get("policy", {})]
    policy_part = f"policy: {', '.join(set_rules)}" if not rules.empty else "no policy"
    pinned = [text for text, on in (
        ("site files pinned to the system's", site_trust.site_files == "system"),
        ("SCRUN_PY_LUA refused", not site_trust.lua_override)) if on]
    trust_part = f"; {', '.join(pinned)}" if pinned else ""
    return Check("scrun-py.toml", OK, f"{where}: {audit_part}; {policy_part}{trust_part}")


def site_origin(ctx: Context, site: site_conf.SiteConf) -> str:
    """Why this site file is the one in use (site/site_conf.py's rules)."""
    from scrun_py.base.conf_lookup import in_configless_dir

    if site.path != site.system_path:
        return "beside slurm.conf"
    if site.system_trust.get("site_files") == "system":
        return "the system's: [trust] site_files pins it"
    if in_configless_dir(ctx.slurm_conf):
        return "the system's: slurm.conf is a configless copy, which never has one"
    return "the system's, beside slurm.conf"
