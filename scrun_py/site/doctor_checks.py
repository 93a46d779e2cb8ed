"""`scrun-py doctor`: check, in order, everything a site needs for scrun-py.

Each check returns a `Check` (ok / warning / failed / skipped, what was found, how to
fix it).  Checks after a failed one still run when they can, so one run shows every
problem; a check that cannot run without something found missing (slurm.conf, a valid
oci.conf) is skipped, saying which.

The commands the checks run (srun, scontrol, munge, unshare, docker) start together
when `doctor` starts, and share one deadline (PROBE_TIMEOUT_S): when nothing answers,
`doctor` still ends after about that long, and says which command did not answer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from scrun_py.base.errors import ScrunError
from scrun_py.base.invocation import Invocation

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.slurm import choice

OK, WARN, FAIL, SKIP = "ok", "warning", "failed", "skipped"
_MARK = {OK: "✔", WARN: "!", FAIL: "✘", SKIP: "-"}
#: how long the commands of all the checks may take together (they run at once)
PROBE_TIMEOUT_S = 4.0


@dataclass
class Check:
    name: str
    status: str
    found: str
    fix: str = ""

    @property
    def fatal(self) -> bool:
        return self.status == FAIL


def _run(argv: list[str], timeout_s: float = PROBE_TIMEOUT_S, stdin: bytes | None = None,
         env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit code, output) of a check command; its failure to run is in the output."""
    from scrun_py.base import procs

    res = procs.run(argv, env=env, timeout_s=timeout_s, stdin=stdin)
    if res.error:
        return res.status, f"{argv[0]}: not found"
    if res.timed_out:
        return res.status, f"{' '.join(argv[:2])}: no answer within {timeout_s:.1f}s"
    return res.status, res.text.strip()


def _resolve_program(name: str) -> str | None:
    """The program scrun-py would run for `name` (procs.resolve_program: absolute PATH
    entries only), None when there is none: shutil.which would also find one through an
    empty or relative PATH entry, which scrun-py never uses."""
    from scrun_py.base import procs

    try:
        return procs.resolve_program(name, os.environ)
    except OSError:
        return None


class _Probe:
    """The commands of one check, run in a thread from the start of `doctor`."""

    def __init__(self, work: Callable[[], tuple[int, str]]) -> None:
        import threading

        self._result: tuple[int, str] | None = None

        def target() -> None:
            try:
                self._result = work()
            except Exception as exc:  # a check must never crash the report
                self._result = (1, f"check crashed: {exc!r}")

        # a daemon: one that outlives its deadline (procs.run kills the command) does
        # not hold the report back
        self._thread = threading.Thread(target=target, name="doctor-probe", daemon=True)
        self._thread.start()

    def result(self, deadline: float, what: str) -> tuple[int, str]:
        import time

        # a second more (for all probes together) for procs.run to kill a late command
        self._thread.join(max(0.0, deadline + 1.0 - time.monotonic()))
        if self._result is None:
            from scrun_py.base import procs

            return procs.TIMEOUT_STATUS, f"{what}: no answer"
        return self._result


class Doctor:
    """Runs the checks for one invocation; results in `self.checks`."""

    def __init__(self, inv: Invocation, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.inv = inv
        self.slurm_conf = Path(inv.slurm_conf_file())
        self.env = {**os.environ, "SLURM_CONF": str(self.slurm_conf)}
        self.version: tuple[int, int] | None = None
        self.checks: list[Check] = []
        self.timeout_s = timeout_s
        self.deadline = 0.0
        self._probes: dict[str, _Probe] = {}
        self._runtime_cmd: str | None = None
        self._oci_conf_ok = False
        self._unmunged = False  # set once munge -n has given a credential
        from scrun_py.slurm.argv import CLIENT_COMMANDS

        self._missing = [c for c in CLIENT_COMMANDS if _resolve_program(c) is None]
        self._conf_problem = self._slurm_conf_problem()

    def _slurm_conf_problem(self) -> str:
        """Why slurm.conf cannot be used ('' if it can)."""
        path = self.slurm_conf
        if not path.exists():
            return f"{path}: not found"
        if not path.is_file():
            return f"{path}: not a regular file"
        if not os.access(path, os.R_OK):
            return f"{path}: not readable"
        return ""

    def _needs_conf(self, name: str, why: str = "") -> Check:
        """A check skipped for want of slurm.conf."""
        return Check(name, SKIP, f"not checked: {why or 'needs slurm.conf'} "
                                 f"({self._conf_problem})")

    def run(self) -> list[Check]:
        import time

        self.deadline = time.monotonic() + self.timeout_s
        self._start_probes()
        steps: list[Callable[[], Check]] = [
            self.slurm_conf_found, self.slurm_commands, self.slurm_release, self.slurmctld,
            self.slurm_backend, self.munge, self.oci_conf, self.scrun_lua, self.site_file,
            self.oci_runtime, self.user_namespaces, self.root_dir, self.engines]
        for step in steps:
            try:
                self.checks.append(step())
            except Exception as exc:  # a check must never crash the report
                self.checks.append(Check(step.__name__, FAIL, f"check crashed: {exc!r}"))
        return self.checks

    # -- the commands, started at once -----------------------------------------------------

    def _remaining(self) -> float:
        import time

        return max(0.1, self.deadline - time.monotonic())

    def _command(self, argv: list[str], stdin: bytes | None = None,
                 env: dict[str, str] | None = None) -> tuple[int, str]:
        return _run(argv, timeout_s=self._remaining(), stdin=stdin, env=env)

    def _start_probes(self) -> None:
        from scrun_py.slurm.argv import build_ping_argv, build_version_argv

        def munge() -> tuple[int, str]:
            rc, cred = self._command(["munge", "-n"])
            if rc != 0:
                return rc, cred
            self._unmunged = True
            return self._command(["unmunge"], stdin=cred.encode())

        work: dict[str, Callable[[], tuple[int, str]]] = {
            "munge": munge,
            # unshare runs `true` by the absolute path it is given, never by a PATH search
            "unshare": lambda: self._command(["unshare", "--user", "--map-root-user",
                                              _resolve_program("true") or "/bin/true"]),
            "docker": lambda: self._command(["docker", "info", "--format",
                                             "{{json .Runtimes}}"]),
        }
        if not self._conf_problem:  # srun and scontrol retry a missing slurm.conf for 60 s
            if not self._missing:
                work["version"] = lambda: self._command(build_version_argv(), env=self.env)
            work["ping"] = lambda: self._command(build_ping_argv(), env=self.env)
        self._probes = {name: _Probe(fn) for name, fn in work.items()}

    def _probe(self, name: str, what: str) -> tuple[int, str]:
        return self._probes[name].result(self.deadline, what)

    # -- the checks ------------------------------------------------------------------------

    def slurm_conf_found(self) -> Check:
        if not self._conf_problem:
            return Check("slurm.conf", OK, str(self.slurm_conf))
        source = ("-f" if self.inv.slurm_conf_name is not None
                  else "SLURM_CONF" if os.environ.get("SLURM_CONF") else "the default path")
        return Check("slurm.conf", FAIL, f"{self._conf_problem} (from {source})",
                     "pass -f /path/to/slurm.conf or set SLURM_CONF; the checks that "
                     "need it are skipped until then")

    def slurm_commands(self) -> Check:
        name = "Slurm client commands"
        if self._missing:
            return Check(name, FAIL, "missing: " + ", ".join(self._missing),
                         "install Slurm's client commands (Debian: slurm-client)")
        if self._conf_problem:
            return Check(name, SKIP, "on PATH; their release is not asked: srun needs "
                         f"slurm.conf even for --version ({self._conf_problem})")
        from scrun_py.slurm.parse import parse_version

        rc, out = self._probe("version", "srun --version")
        if rc == 0:
            self.version = parse_version(out)
        if self.version is None:
            said = out if out.startswith(("srun:", "srun --version")) else f"srun --version: {out}"
            return Check(name, FAIL, said[:200], "check the Slurm installation")
        if self.version < (22, 5):
            return Check(name, FAIL, out, "scrun-py needs Slurm 22.05 or newer")
        return Check(name, OK, out)

    def slurm_release(self) -> Check:
        """The release, and which release-dependent features a container job gets."""
        from scrun_py.slurm.releases import offered, release_name

        if self.version is None:
            if self._conf_problem and not self._missing:
                return self._needs_conf("Slurm release")
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

    def slurmctld(self) -> Check:
        name = "slurmctld answering"
        if self._conf_problem:
            return self._needs_conf(name)
        from scrun_py.slurm.parse import parse_ping

        rc, out = self._probe("ping", "scontrol ping")
        up, found, auth = parse_ping(rc, out)
        if up:
            return Check(name, OK, found)
        if auth is not None:
            return Check(name, FAIL, f"{found}: this host cannot authenticate to it ({auth})",
                         "start munged, or fix the socket of AuthInfo in slurm.conf (see "
                         "the munge check); slurmctld itself may be up")
        return Check(name, FAIL, found[:200],
                     f"start slurmctld; check SlurmctldHost and SlurmctldPort in "
                     f"{self.slurm_conf} and the network between here and it")

    def slurm_backend(self) -> Check:
        """Which backend an anchor started here uses (SCRUN_PY_SLURM_BACKEND), and why."""
        from scrun_py.slurm import choice

        name = "Slurm backend"
        try:
            mode = choice.mode_of(os.environ)
            if mode == "auto" and not choice.pyslurm_installed():
                return Check(name, OK, "cli (auto: pyslurm is not installed)")
            if self._conf_problem and mode != "cli":
                return self._needs_conf(name)
            chosen = self._within(
                lambda: choice.choose(mode, str(self.slurm_conf), lambda: self.version))
        except TimeoutError:
            return Check(name, FAIL, f"pyslurm: no answer from slurmctld within "
                                     f"{self.timeout_s:g}s",
                         "see the slurmctld check; or set "
                         f"{choice.BACKEND_ENV}=cli")
        except ScrunError as exc:
            return Check(name, FAIL, str(exc),
                         f"set {choice.BACKEND_ENV} to auto or cli, or install the pyslurm "
                         "built for slurmctld's release (docs/architecture.md)")
        return Check(name, OK, f"{chosen.name} ({chosen.reason})")

    def _within(self, work: Callable[[], choice.Choice]) -> choice.Choice:
        """`work()` (pyslurm's RPCs, in this process) before the deadline; TimeoutError
        if it has not returned by then (its thread is left to itself, a daemon)."""
        import threading

        box: list[choice.Choice | BaseException] = []

        def target() -> None:
            try:
                box.append(work())
            except BaseException as exc:
                box.append(exc)

        thread = threading.Thread(target=target, name="doctor-backend", daemon=True)
        thread.start()
        thread.join(self._remaining())
        if not box:
            raise TimeoutError
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def munge(self) -> Check:
        from scrun_py.base import procs

        rc, out = self._probe("munge", "munge -n")
        if rc == 0:
            return Check("munge", OK, "credential encoded and decoded")
        first = out.splitlines()[0][:200] if out else f"exit {rc}"
        if self._unmunged:  # munge -n worked, unmunge failed
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

    def oci_conf(self) -> Check:
        from scrun_py.site.oci_conf import find_oci_conf, load_oci_conf

        if self._conf_problem:
            return self._needs_conf("oci.conf", "it is read next to slurm.conf")
        path = find_oci_conf(self.slurm_conf)
        if not path.exists():
            return Check("oci.conf", FAIL, f"{path}: not found (it is read next to "
                                           "slurm.conf)",
                         "copy oci.conf.example there and adapt it (docs/oci.conf.md)")
        try:
            conf = load_oci_conf(path)
        except ScrunError as exc:
            return Check("oci.conf", FAIL, str(exc), "see oci.conf.example and docs/oci.conf.md")
        self._oci_conf_ok = True
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

        if self._conf_problem:
            return self._needs_conf("scrun.lua", "it is found next to slurm.conf")
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

        if self._conf_problem:
            return self._needs_conf("scrun-py.toml", "it is found next to slurm.conf")
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
        if not self._oci_conf_ok:
            return Check("OCI runtime", SKIP, "not checked: needs a readable oci.conf "
                                              "(see the oci.conf check)")
        if not cmd:
            return Check("OCI runtime", WARN, "no RunTimeRun/RunTimeCreate to inspect")
        found = _resolve_program(cmd)
        if found is None:
            return Check("OCI runtime", FAIL, f"{cmd}: not installed on this node (not on "
                                              "PATH)",
                         f"install {cmd} on every node that runs containers (oci.conf runs "
                         "it there)")
        return Check("OCI runtime", OK, found)

    def user_namespaces(self) -> Check:
        try:
            limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
        except (OSError, ValueError):
            limit = -1
        if limit == 0:
            return Check("unprivileged user namespaces", FAIL, "user.max_user_namespaces = 0",
                         "sysctl -w user.max_user_namespaces=15000")
        rc, out = self._probe("unshare", "unshare --user")
        if rc != 0:
            return Check("unprivileged user namespaces", FAIL, out[:200],
                         "allow unprivileged user namespaces (sysctl, AppArmor policy)")
        return Check("unprivileged user namespaces", OK, f"max_user_namespaces={limit}")

    def root_dir(self) -> Check:
        root = Path(self.inv.root_dir)
        probe = root
        while not os.path.exists(probe) and probe != probe.parent:
            probe = probe.parent
        if os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK):
            return Check("--root", OK, f"{root} (usable)")
        return Check("--root", FAIL, f"{root}: not writable (nearest existing: {probe})",
                     "pass --root, or set XDG_RUNTIME_DIR to a writable directory")

    def engines(self) -> Check:
        found = []
        rc, out = self._probe("docker", "docker info")
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
