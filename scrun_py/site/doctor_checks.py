"""`scrun-py doctor`: check, in order, everything a site needs for scrun-py.

Each check returns a `Check` (ok / warning / failed, what was found, how to fix).
Checks after a failed one still run when they can, so one run shows every problem.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from scrun_py.base.errors import ScrunError
from scrun_py.base.invocation import Invocation

OK, WARN, FAIL = "ok", "warning", "failed"
SLURM_COMMANDS = ("salloc", "srun", "scancel", "squeue", "sinfo")
_MARK = {OK: "✔", WARN: "!", FAIL: "✘"}


@dataclass
class Check:
    name: str
    status: str
    found: str
    fix: str = ""

    @property
    def fatal(self) -> bool:
        return self.status == FAIL


def _run(argv: list[str], timeout_s: float = 15, stdin: bytes | None = None,
         env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit code, output) of a check command; its failure to run is in the output."""
    from scrun_py.base import procs

    res = procs.run(argv, env=env, timeout_s=timeout_s, stdin=stdin)
    if res.error:
        return res.status, f"{argv[0]}: not found"
    if res.timed_out:
        return res.status, f"{argv[0]}: timed out after {timeout_s:g}s"
    return res.status, res.text.strip()


class Doctor:
    """Runs the checks for one invocation; results in `self.checks`."""

    def __init__(self, inv: Invocation) -> None:
        self.inv = inv
        self.slurm_conf = inv.slurm_conf_path()
        self.env = {**os.environ, "SLURM_CONF": str(self.slurm_conf)}
        self.version: tuple[int, int] | None = None
        self.checks: list[Check] = []
        self._runtime_cmd: str | None = None

    def run(self) -> list[Check]:
        steps: list[Callable[[], Check]] = [
            self.slurm_commands, self.slurm_release, self.slurm_conf_found, self.slurmctld,
            self.slurm_backend, self.munge, self.oci_conf, self.scrun_lua, self.site_file,
            self.oci_runtime, self.user_namespaces, self.root_dir, self.engines]
        for step in steps:
            try:
                self.checks.append(step())
            except Exception as exc:  # a check must never crash the report
                self.checks.append(Check(step.__name__, FAIL, f"check crashed: {exc!r}"))
        return self.checks

    def slurm_commands(self) -> Check:
        missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
        if missing:
            return Check("Slurm client commands", FAIL, "missing: " + ", ".join(missing),
                         "install Slurm's client commands (Debian: slurm-client)")
        from scrun_py.slurm.argv import build_version_argv
        from scrun_py.slurm.parse import parse_version

        rc, out = _run(build_version_argv(), env=self.env)
        if rc == 0:
            self.version = parse_version(out)
        if self.version is None:
            return Check("Slurm client commands", FAIL, f"srun --version: {out[:200]}",
                         "check the Slurm installation")
        if self.version < (22, 5):
            return Check("Slurm client commands", FAIL, out,
                         "scrun-py needs Slurm 22.05 or newer")
        return Check("Slurm client commands", OK, out)

    def slurm_release(self) -> Check:
        """The release, and which release-dependent features a container job gets."""
        from scrun_py.slurm.releases import offered, release_name

        if self.version is None:
            return Check("Slurm release", FAIL, "unknown (no working srun)",
                         "install Slurm's client commands")
        has, lacks = offered(self.version)
        found = release_name(self.version) + ": " + (", ".join(f.name for f in has) or "-")
        if not lacks:
            return Check("Slurm release", OK, found)
        return Check("Slurm release", OK if has else WARN,
                     f"{found}; not on this release: " + ", ".join(f.name for f in lacks),
                     "" if has else "Slurm 23.02 or newer gives containers their task's "
                     "environment (SLURM_PROCID, SLURM_NODEID)")

    def slurm_conf_found(self) -> Check:
        if self.slurm_conf.is_file():
            return Check("slurm.conf", OK, str(self.slurm_conf))
        return Check("slurm.conf", FAIL, f"{self.slurm_conf}: not found",
                     "pass -f /path/to/slurm.conf or set SLURM_CONF")

    def slurmctld(self) -> Check:
        rc, out = _run(["scontrol", "ping"], env=self.env)
        if rc == 0 and "UP" in out:
            return Check("slurmctld answering", OK, out.splitlines()[0])
        return Check("slurmctld answering", FAIL, (out or f"exit {rc}").splitlines()[-1][:200],
                     "start slurmctld; check SlurmctldHost in slurm.conf and the network")

    def slurm_backend(self) -> Check:
        """Which backend an anchor started here uses (SCRUN_PY_SLURM_BACKEND), and why."""
        from scrun_py.slurm import choice

        name = "Slurm backend"
        try:
            mode = choice.mode_of(os.environ)
            if mode == "auto" and not choice.pyslurm_installed():
                return Check(name, OK, "cli (auto: pyslurm is not installed)")
            chosen = choice.choose(mode, str(self.slurm_conf), lambda: self.version)
        except ScrunError as exc:
            return Check(name, FAIL, str(exc),
                         f"set {choice.BACKEND_ENV} to auto or cli, or install the pyslurm "
                         "built for slurmctld's release (docs/architecture.md)")
        return Check(name, OK, f"{chosen.name} ({chosen.reason})")

    def munge(self) -> Check:
        rc, cred = _run(["munge", "-n"])
        if rc != 0:
            return Check("munge", FAIL, cred[:200], "start munged (AuthType=auth/munge)")
        rc, out = _run(["unmunge"], stdin=cred.encode())
        if rc != 0:
            return Check("munge", FAIL, out.splitlines()[0][:200] if out else f"exit {rc}",
                         "check /etc/munge/munge.key is the same on every node")
        return Check("munge", OK, "credential encoded and decoded")

    def oci_conf(self) -> Check:
        from scrun_py.site.oci_conf import find_oci_conf, load_oci_conf

        path = find_oci_conf(self.slurm_conf)
        try:
            conf = load_oci_conf(path)
        except ScrunError as exc:
            return Check("oci.conf", FAIL, str(exc), "see oci.conf.example and docs/oci.conf.md")
        problems = conf.supported_by(self.version) if self.version else []
        words = (conf.runtime_run or conf.runtime_create or "").split()
        execs = bool(words) and words[0] == "exec"
        words = words[1:] if execs else words
        self._runtime_cmd = words[0] if words else None
        if problems:
            return Check("oci.conf", FAIL, f"{path}: " + "; ".join(problems),
                         f"this Slurm ({'.'.join(map(str, self.version or ()))}) cannot run "
                         "this oci.conf: see docs/oci.conf.md")
        if conf.mode == "create-start":
            return Check("oci.conf", WARN, f"{path}: create/start mode (RunTimeCreate)",
                         "use RunTimeRun: slurmstepd reads RunTimeCreate's output until "
                         "end of file, which the created container holds, so the step "
                         "never ends; redirected to the task's stdio (/proc/$PPID/fd/N) "
                         "it runs, for root only, and the container's exit code is lost "
                         "(the task exits with RunTimeStart's status) (docs/releases.md)")
        if conf.runtime_run and not execs:
            return Check("oci.conf", WARN, f"{path}: RunTimeRun does not start with exec",
                         "write RunTimeRun=\"exec <runtime> run ...\": otherwise scancel "
                         "kills only the shell around the runtime and the container "
                         "outlives its job (docs/oci.conf.md)")
        return Check("oci.conf", OK, f"{path} ({conf.mode} mode)")

    def scrun_lua(self) -> Check:
        from scrun_py.hooks.interface import NoHooks, load_hooks
        from scrun_py.site import site_conf, trust

        site: site_conf.SiteConf | None = None
        try:  # where create looks (a broken site file is the scrun-py.toml check's)
            site = site_conf.load(self.slurm_conf)
            site_trust = trust.parse(site)
        except ScrunError:
            site = None
        try:
            if site is not None:
                trust.check_lua_override(site_trust, os.environ, site)
            hooks = load_hooks(self.slurm_conf, site_dir=site.directory if site else None)
        except ScrunError as exc:
            return Check("scrun.lua", FAIL, str(exc), "fix the script (docs/hooks.md)")
        if isinstance(hooks, NoHooks):
            return Check("scrun.lua", WARN, "none: stage_in/stage_out are no-ops",
                         "bundles must then be on a filesystem the compute nodes share; "
                         "see lua/")
        script = getattr(hooks, "script", "scrun.lua")
        hooks.close()
        return Check("scrun.lua", OK, f"{script}: loads, both hooks defined")

    def site_file(self) -> Check:
        from scrun_py.site import audit, policy, site_conf, trust

        try:
            site = site_conf.load(self.slurm_conf)
            audit_settings = audit.load_settings(self.slurm_conf, site)
            rules = policy.load_policy(site)
            site_trust = trust.parse(site)
        except ScrunError as exc:
            return Check("scrun-py.toml", FAIL, str(exc), "fix the file (docs/policy.md, "
                         "docs/audit.md): every create fails until then")
        if not site.data:
            return Check("scrun-py.toml", OK, f"{site.path}: none (no audit trail, no policy)")
        sinks = [name for name, on in (("file", bool(audit_settings.file)),
                                       ("syslog", audit_settings.syslog)) if on]
        audit_part = f"audit to {' and '.join(sinks)}" if sinks else "no audit trail"
        set_rules = [k for k in policy.KEYS if k in site.data.get("policy", {})]
        policy_part = f"policy: {', '.join(set_rules)}" if not rules.empty else "no policy"
        pinned = [text for text, on in (
            ("site files pinned to the system's", site_trust.site_files == "system"),
            ("SCRUN_PY_LUA refused", not site_trust.lua_override)) if on]
        trust_part = f"; {', '.join(pinned)}" if pinned else ""
        return Check("scrun-py.toml", OK,
                     f"{site.path}: {audit_part}; {policy_part}{trust_part}")

    def oci_runtime(self) -> Check:
        cmd = self._runtime_cmd
        if not cmd:
            return Check("OCI runtime", WARN, "no RunTimeRun/RunTimeCreate to inspect")
        found = shutil.which(cmd)
        if found is None:
            return Check("OCI runtime", FAIL, f"{cmd}: not on PATH here",
                         f"install {cmd} on the compute nodes (oci.conf runs it there)")
        return Check("OCI runtime", OK, found)

    def user_namespaces(self) -> Check:
        try:
            limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
        except (OSError, ValueError):
            limit = -1
        if limit == 0:
            return Check("unprivileged user namespaces", FAIL, "user.max_user_namespaces = 0",
                         "sysctl -w user.max_user_namespaces=15000")
        rc, out = _run(["unshare", "--user", "--map-root-user", "true"])
        if rc != 0:
            return Check("unprivileged user namespaces", FAIL, out[:200],
                         "allow unprivileged user namespaces (sysctl, AppArmor policy)")
        return Check("unprivileged user namespaces", OK, f"max_user_namespaces={limit}")

    def root_dir(self) -> Check:
        root = self.inv.root
        probe = root
        while not os.path.exists(probe) and probe != probe.parent:
            probe = probe.parent
        if os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK):
            return Check("--root", OK, f"{root} (usable)")
        return Check("--root", FAIL, f"{root}: not writable (nearest existing: {probe})",
                     "pass --root, or set XDG_RUNTIME_DIR to a writable directory")

    def engines(self) -> Check:
        found = []
        rc, out = _run(["docker", "info", "--format", "{{json .Runtimes}}"], timeout_s=10)
        if rc == 0 and "scrun-py" in out:
            found.append("docker")
        for conf in (Path("/etc/containers/containers.conf"),
                     Path(os.environ.get("CONTAINERS_CONF", "/nonexistent")),
                     Path.home() / ".config/containers/containers.conf"):
            try:
                if "scrun-py" in conf.read_text():
                    found.append(f"podman ({conf})")
                    break
            except OSError:
                continue
        if found:
            return Check("docker/podman runtime", OK, "scrun-py registered with "
                         + ", ".join(found))
        return Check("docker/podman runtime", WARN, "no engine has scrun-py as a runtime",
                     "see docs/docker.md and docs/podman.md")


def render_table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        line = f"{_MARK[c.status]} {c.name.ljust(width)}  {c.found}"
        if c.fix and c.status != OK:
            line += f"\n  {' ' * width}  fix: {c.fix}"
        lines.append(line)
    return "\n".join(lines)


def as_json(checks: list[Check]) -> list[dict[str, str]]:
    return [asdict(c) for c in checks]
