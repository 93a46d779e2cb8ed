"""doctor's checks of what runs containers here: oci.conf, the OCI runtime it names,
unprivileged user namespaces, the --root state directory."""

from __future__ import annotations

import os
from pathlib import Path

from scrun_py.base.errors import ScrunError
from scrun_py.commands.doctor.context import Context, resolve_program
from scrun_py.commands.doctor.report import FAIL, OK, SKIP, WARN, Check

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.site.oci_conf import OciConf


def runtime_words(conf: OciConf) -> tuple[bool, str | None]:
    """Whether RunTimeRun (or RunTimeCreate) starts with `exec`, and the command it runs
    (its first word after `exec`; None when neither is set)."""
    words = (conf.runtime_run or conf.runtime_create or "").split()
    execs = bool(words) and words[0] == "exec"
    words = words[1:] if execs else words
    return execs, words[0] if words else None


def oci_conf(ctx: Context) -> Check:
    """oci.conf beside slurm.conf is valid and this Slurm can run it (sets
    `ctx.oci_conf_ok` and `ctx.runtime_cmd`)."""
    from scrun_py.site.oci_conf import load_oci_conf
    from scrun_py.site.oci_conf_syntax import missing_text, oci_conf_path

    if ctx.conf_problem:
        return ctx.needs_conf("oci.conf", "it is read next to slurm.conf")
    path = oci_conf_path(ctx.slurm_conf)
    if not os.path.exists(path):
        return Check("oci.conf", FAIL, missing_text(path).removeprefix("oci.conf: "),
                     "copy oci.conf.example there and adapt it (docs/oci.conf.md)")
    try:
        conf = load_oci_conf(path)
    except ScrunError as exc:
        return Check("oci.conf", FAIL, str(exc), "see oci.conf.example and docs/oci.conf.md")
    ctx.oci_conf_ok = True
    problems = conf.supported_by(ctx.version) if ctx.version else []
    execs, ctx.runtime_cmd = runtime_words(conf)
    if problems:
        return Check("oci.conf", FAIL, f"{path}: " + "; ".join(problems),
                     f"this Slurm ({'.'.join(map(str, ctx.version or ()))}) cannot run "
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
    return Check("oci.conf", OK, f"{path} ({conf.mode} mode; beside slurm.conf)")


def oci_runtime(ctx: Context) -> Check:
    """The command oci.conf runs is installed on this node."""
    cmd = ctx.runtime_cmd
    if not ctx.oci_conf_ok:
        return Check("OCI runtime", SKIP, "not checked: needs a readable oci.conf "
                                          "(see the oci.conf check)")
    if not cmd:
        return Check("OCI runtime", WARN, "no RunTimeRun/RunTimeCreate to inspect")
    found = resolve_program(cmd)
    if found is None:
        return Check("OCI runtime", FAIL, f"{cmd}: not installed on this node (not on "
                                          "PATH)",
                     f"install {cmd} on every node that runs containers (oci.conf runs "
                     "it there)")
    return Check("OCI runtime", OK, found)


def user_namespaces(ctx: Context,
                    limit_file: str = "/proc/sys/user/max_user_namespaces") -> Check:
    """The kernel allows unprivileged user namespaces and `unshare -Ur` works."""
    try:
        limit = int(Path(limit_file).read_text())
    except (OSError, ValueError):
        limit = -1
    if limit == 0:
        return Check("unprivileged user namespaces", FAIL, "user.max_user_namespaces = 0",
                     "sysctl -w user.max_user_namespaces=15000")
    rc, out = ctx.probe("unshare", "unshare --user")
    if rc != 0:
        return Check("unprivileged user namespaces", FAIL, out[:200],
                     "allow unprivileged user namespaces (sysctl, AppArmor policy)")
    return Check("unprivileged user namespaces", OK, f"max_user_namespaces={limit}")


def root_dir(ctx: Context) -> Check:
    """The state directory, or its nearest existing parent, is writable."""
    root = Path(ctx.inv.root_dir)
    probe = root
    while not os.path.exists(probe) and probe != probe.parent:
        probe = probe.parent
    if os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK):
        return Check("--root", OK, f"{root} (usable)")
    return Check("--root", FAIL, f"{root}: not writable (nearest existing: {probe})",
                 "pass --root, or set XDG_RUNTIME_DIR to a writable directory")
