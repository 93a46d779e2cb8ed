"""doctor's Slurm checks: slurm.conf, the client commands and their release, slurmctld,
the backend an anchor would use, munge."""

from __future__ import annotations

import os

from scrun_py.base.errors import ScrunError
from scrun_py.commands.doctor.context import Context, within
from scrun_py.commands.doctor.report import FAIL, OK, SKIP, WARN, Check

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.base.conf_lookup import Choice


def slurm_conf_found(ctx: Context) -> Check:
    """slurm.conf is a readable file, and how it was found (-f, SLURM_CONF, a
    compiled-in default, the configless copy); else where it looked."""
    choice = ctx.choice
    if not ctx.conf_problem:
        origin = f" ({choice.origin()})" if choice is not None else ""
        shadowed = shadowed_copy(choice)
        if shadowed:
            return Check("slurm.conf", WARN, f"{ctx.slurm_conf}{origin}; the configless "
                         f"copy {shadowed} is not read: this file comes first, for Slurm's "
                         "commands too",
                         f"remove {ctx.slurm_conf} if this node is to be configless")
        return Check("slurm.conf", OK, f"{ctx.slurm_conf}{origin}")
    fix = ("pass -f /path/to/slurm.conf or set SLURM_CONF; the checks that need it are "
           "skipped until then")
    if choice is not None and not choice.found:
        return Check("slurm.conf", FAIL, choice.not_found().partition("; ")[0],
                     fix + "; on a configless login node, start sackd --conf-server "
                     "(Slurm 23.11+), which copies slurm.conf to /run/slurm/conf")
    source = ("-f" if ctx.inv.slurm_conf_name is not None
              else "SLURM_CONF" if os.environ.get("SLURM_CONF")
              else choice.origin() if choice is not None else "the default path")
    return Check("slurm.conf", FAIL, f"{ctx.conf_problem} (from {source})", fix)


def shadowed_copy(choice: Choice | None) -> str:
    """The configless copy a compiled-in default found first hides ('' if none)."""
    from scrun_py.base import conf_lookup, layout

    if choice is None or choice.rule not in (conf_lookup.PREFIX, conf_lookup.DEFAULT):
        return ""
    return layout.CONFIGLESS_SLURM_CONF if os.path.exists(layout.CONFIGLESS_SLURM_CONF) \
        else ""


def slurm_commands(ctx: Context) -> Check:
    """The client commands are on PATH and srun reports a release of 22.05 or newer
    (sets `ctx.version`)."""
    from scrun_py.slurm.parse import parse_version

    name = "Slurm client commands"
    if ctx.missing:
        return Check(name, FAIL, "missing: " + ", ".join(ctx.missing),
                     "install Slurm's client commands (Debian: slurm-client)")
    if ctx.conf_problem:
        return Check(name, SKIP, "on PATH; their release is not asked: srun needs "
                     f"slurm.conf even for --version ({ctx.conf_problem})")
    rc, out = ctx.probe("version", "srun --version")
    if rc == 0:
        ctx.version = parse_version(out)
    if ctx.version is None:
        said = out if out.startswith(("srun:", "srun --version")) else f"srun --version: {out}"
        return Check(name, FAIL, said[:200], "check the Slurm installation")
    if ctx.version < (22, 5):
        return Check(name, FAIL, out, "scrun-py needs Slurm 22.05 or newer")
    return Check(name, OK, out)


def slurm_release(ctx: Context) -> Check:
    """The release, and which release-dependent features a container job gets."""
    from scrun_py.slurm.releases import offered, release_name

    if ctx.version is None:
        if ctx.conf_problem and not ctx.missing:
            return ctx.needs_conf("Slurm release")
        return Check("Slurm release", FAIL, "unknown (no working srun)",
                     "install Slurm's client commands")
    has, lacks = offered(ctx.version)
    found = release_name(ctx.version) + ": " + (", ".join(f.name for f in has) or "-")
    if not lacks:
        return Check("Slurm release", OK, found)
    return Check("Slurm release", OK if has else WARN,
                 f"{found}; not on this release: " + ", ".join(f.name for f in lacks),
                 "" if has else "Slurm 23.02 or newer gives containers their task's "
                 "environment (SLURM_PROCID, SLURM_NODEID)")


def slurmctld(ctx: Context) -> Check:
    """`scontrol ping` reports slurmctld UP; else its DOWN line, or munge failing here."""
    from scrun_py.slurm.parse import parse_ping

    name = "slurmctld answering"
    if ctx.conf_problem:
        return ctx.needs_conf(name)
    rc, out = ctx.probe("ping", "scontrol ping")
    up, found, auth = parse_ping(rc, out)
    if up:
        ctx.ctld_up = True
        return Check(name, OK, found)
    if auth is not None:
        return Check(name, FAIL, f"{found}: this host cannot authenticate to it ({auth})",
                     "start munged, or fix the socket of AuthInfo in slurm.conf (see "
                     "the munge check); slurmctld itself may be up")
    return Check(name, FAIL, found[:200],
                 f"start slurmctld; check SlurmctldHost and SlurmctldPort in "
                 f"{ctx.slurm_conf} and the network between here and it")


def slurm_backend(ctx: Context) -> Check:
    """Which backend an anchor started here uses (SCRUN_PY_SLURM_BACKEND), and why."""
    from scrun_py.slurm import choice

    name = "Slurm backend"
    try:
        mode = choice.mode_of(os.environ)
        if mode == "auto" and not choice.pyslurm_installed():
            return Check(name, OK, "cli (auto: pyslurm is not installed)")
        if ctx.conf_problem and mode != "cli":
            return ctx.needs_conf(name)
        chosen = within(lambda: choice.choose(mode, str(ctx.slurm_conf), lambda: ctx.version),
                        ctx.deadline)
    except TimeoutError:
        return Check(name, FAIL, f"pyslurm: no answer from slurmctld within "
                                 f"{ctx.timeout_s:g}s",
                     f"see the slurmctld check; or set {choice.BACKEND_ENV}=cli")
    except ScrunError as exc:
        return Check(name, FAIL, str(exc),
                     f"set {choice.BACKEND_ENV} to auto or cli, or install the pyslurm "
                     "built for slurmctld's release (docs/architecture.md)")
    return Check(name, OK, f"{chosen.name} ({chosen.reason})")


def munge(ctx: Context) -> Check:
    """`munge -n | unmunge` works here; else why not (not installed, munged not
    running or not answering, a key that does not decode)."""
    from scrun_py.base import procs

    rc, out = ctx.probe("munge", "munge -n")
    if rc == 0:
        return Check("munge", OK, "credential encoded and decoded")
    first = out.splitlines()[0][:200] if out else f"exit {rc}"
    if ctx.unmunged:  # munge -n worked, unmunge failed
        return Check("munge", FAIL, first,
                     "check /etc/munge/munge.key is the same on every node")
    if rc == procs.NOT_STARTED_STATUS:
        return Check("munge", FAIL, "munge: not installed on this node",
                     "install munge (Debian: munge), give it the cluster's key, start "
                     "munged (AuthType=auth/munge)")
    if rc == procs.TIMEOUT_STATUS:
        return Check("munge", FAIL, f"munged does not answer: {first}", "restart munged")
    if any(w in out for w in ("Did you start munged", "Failed to access",
                              "Failed to connect")):
        return Check("munge", FAIL, f"munged is not running: {first}",
                     "start munged (systemctl start munge)")
    return Check("munge", FAIL, first, "start munged (AuthType=auth/munge)")
