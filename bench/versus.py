"""scrun-py and Slurm's own scrun side by side, same configuration, same bundles: the
lifecycle, `state` and anchor RSS rows once per site configuration (CONFIGS), and
`podman`/`docker run --rm` (a private dockerd with both runtimes registered).  Every
call of Slurm's scrun is bounded: a hang is counted, its anchor and job ended, and the
run left out of the timings (never retried)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.common import (
    HANG_S,
    PODMAN_CRUN_ULIMITS,
    REPO,
    SCRUN,
    SLURM_BIN,
    STATE,
    VENV,
    Ctx,
    Hang,
    anchor_of,
    as_user,
    call,
    create_bounded,
    end_container,
    wait_gone,
)
from bench.memory import rss_kb
from bench.stats import guarded, summary


#: the site configurations the rows against Slurm's scrun run with, each its own rows:
#: (key, label, the oci.conf's text).  Both get SrunPath (Slurm's scrun starts srun
#: without PATH) and the shared-filesystem scrun.lua, whose hooks log.
def _guide_oci_conf() -> str:
    """The crun oci.conf of Slurm's containers guide for the release under test (run
    mode, with EnvExclude and RunTimeEnvExclude), as the corpus of the import test
    writes it out; the latest release's for a release the corpus has not."""
    corpus = REPO / "tests" / "unit" / "site_corpus" / "oci"
    release = os.environ.get("SCRUN_TEST_SLURM", "")
    path = corpus / f"{release}-crun-run.conf"
    return (path if path.exists() else corpus / "26.05-crun-run.conf").read_text()


CONFIGS: list[tuple[str, str, Callable[[], str]]] = [
    ("cluster", "the test cluster's oci.conf", (STATE / "oci.conf").read_text),
    ("guide", "the guide's crun oci.conf (EnvExclude, RunTimeEnvExclude)", _guide_oci_conf),
]
EXES = {"scrun-py": SCRUN, "Slurm's scrun": str(SLURM_BIN / "scrun")}


def versus_conf(work: Path, key: str = "cluster") -> Path:
    """One configuration directory per site configuration (CONFIGS), for every row and
    both runtimes (made once): the cluster's slurm.conf, that configuration's oci.conf
    (plus SrunPath: Slurm's scrun starts srun without PATH) and the shared-filesystem
    scrun.lua, whose hooks only log (Slurm's scrun needs one; sites have one)."""
    conf = work / ("vconf" if key == "cluster" else f"vconf-{key}")
    if (conf / "slurm.conf").exists():
        return conf
    conf.mkdir()
    for name in ("slurm.conf", "cgroup.conf"):
        if (STATE / name).exists():
            shutil.copy(STATE / name, conf / name)
    text = next(fn for k, _, fn in CONFIGS if k == key)()
    (conf / "oci.conf").write_text(text.rstrip("\n") + f"\nSrunPath={SLURM_BIN / 'srun'}\n")
    shutil.copy(REPO / "lua" / "scrun.lua", conf / "scrun.lua")
    for kind, exe in (("py", SCRUN), ("slurm", str(SLURM_BIN / "scrun"))):
        # podman passes no --root; Slurm's scrun will not guess one as root
        (conf / f"runtime-{kind}").write_text(
            f"#!/bin/sh\n[ -n \"$XDG_RUNTIME_DIR\" ] || set -- --root {conf}/root-{kind} \"$@\"\n"
            f"exec {exe} -f {conf}/slurm.conf \"$@\"\n")
        os.chmod(conf / f"runtime-{kind}", 0o755)
    (conf / "containers.conf").write_text(
        '[containers]\nnetns = "none"\n\n[engine.runtimes]\n'
        f'slurm = ["{conf}/runtime-py"]\nslurm-scrun = ["{conf}/runtime-slurm"]\n')
    subprocess.run(["chmod", "-R", "a+rX", str(conf)], check=True)
    return conf


def _start_dockerd(ddir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(ddir / "dockerd.log", "wb") as log:
        return subprocess.Popen(
            ["dockerd", "--config-file", str(ddir / "daemon.json"), "--host",
             env["DOCKER_HOST"], "--data-root", str(ddir / "data"), "--exec-root",
             str(ddir / "exec"), "--pidfile", str(ddir / "docker.pid"), "--iptables=false",
             "--ip6tables=false", "--bridge=none", "--storage-driver=overlay2"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def private_dockerd(conf: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """A dockerd of our own with both runtimes registered (the engines' dockerd keeps
    the documented configuration)."""
    ddir = STATE / "bench-docker"
    ddir.mkdir(exist_ok=True)
    (ddir / "daemon.json").write_text(json.dumps({"runtimes": {
        name: {"path": exe, "runtimeArgs": ["-f", f"{conf}/slurm.conf"]}
        for name, exe in (("slurm", SCRUN), ("slurm-scrun", str(SLURM_BIN / "scrun")))}}))
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "DOCKER_HOST": f"unix://{ddir}/docker.sock"}
    proc = _start_dockerd(ddir, env)
    deadline = time.monotonic() + 60
    while subprocess.run(["docker", "version"], env=env, capture_output=True,
                         timeout=30, check=False).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"private dockerd: {(ddir / 'dockerd.log').read_text()[-500:]}")
        time.sleep(0.2)
    image = "scrun-busybox"
    if subprocess.run(["docker", "image", "inspect", image], env=env, capture_output=True,
                      timeout=60, check=False).returncode != 0:
        subprocess.run(["docker", "import", str(STATE / "engines" / "busybox.tar"), image],
                       env=env, check=True, capture_output=True, timeout=120)
    return proc, env


def side_by_side(ctx: Ctx, what: str, fn: Callable[[str, str], None], prefix: str,
                 on_hang: Callable[[str], None]) -> dict[str, object]:
    """One row: `fn(who, cid)` timed `ctx.n` times for each runtime of EXES."""
    res: dict[str, object] = {"name": what}
    for who in EXES:
        tag = f"{prefix}{who[0]}"

        def cid(tag: str = tag) -> str:
            return f"{tag}{next(ctx.counter)}"
        samples, hangs = guarded(partial(fn, who), ctx.n, cid, on_hang)
        res[who] = {**summary(samples), "hangs": hangs}
    return res


@dataclass
class _Site:
    """The calls of both runtimes with one site configuration (its directory `conf`)."""

    ctx: Ctx
    conf: Path

    def base(self, who: str) -> list[str]:
        root = f"{self.ctx.work}/vroot-{self.conf.name}-{'py' if who == 'scrun-py' else 'slurm'}"
        return as_user(self.ctx.pw, [EXES[who], "-f", f"{self.conf}/slurm.conf", "--root",
                                     root])

    def create(self, who: str, cid: str, bundle: str) -> int:
        """`create` through `who`, bounded by HANG_S; the anchor's pid."""
        work = self.ctx.work
        return create_bounded(self.base(who), self.ctx.env, work / bundle,
                              work / f"{cid}.pid", cid)

    def lifecycle(self, who: str, cid: str) -> None:
        anchor = self.create(who, cid, "true")
        call([*self.base(who), "start", cid], self.ctx.env)
        wait_gone(anchor, f"anchor {cid}")
        call([*self.base(who), "delete", cid], self.ctx.env)

    def end(self, cid: str) -> None:
        end_container(cid, self.ctx.env)

    def state_and_rss(self, who: str) -> tuple[dict[str, object], dict[str, object]]:
        """`state` of one running container timed, and its anchor's peak RSS."""
        env = self.ctx.env
        cid = f"vs{who[0]}{next(self.ctx.counter)}"
        state: dict[str, object] = {"median_s": None, "n": 0, "hangs": 1}
        rss: dict[str, object] = {"rss_mb": None, "hangs": 1}
        try:
            anchor = self.create(who, cid, "sleep")
            call([*self.base(who), "start", cid], env)
            state_argv = [*self.base(who), "state", cid]

            def one_state(_cid: str, argv: list[str] = state_argv) -> None:
                call(argv, env)
            samples, hangs = guarded(one_state, self.ctx.n * 3, partial(str, cid), self.end)
            time.sleep(1)
            state = {**summary(samples), "hangs": hangs}
            real = anchor_of(self.base(who), cid, anchor)
            rss = {"rss_mb": round(rss_kb(real) / 1024, 1), "hangs": 0}
            if real != anchor:  # scrun-py's container pid process, beside its anchor
                rss["pid_process_rss_mb"] = round(rss_kb(anchor) / 1024, 1)
            call([*self.base(who), "delete", "--force", cid], env)
            wait_gone(anchor, f"anchor {cid}")
        except Hang:
            self.end(cid)
        return state, rss


def _config_rows(ctx: Ctx, conf: Path, label: str) -> list[dict[str, object]]:
    """The lifecycle, state and anchor RSS rows with the configuration in `conf`."""
    site = _Site(ctx, conf)
    out = [side_by_side(ctx, f"create→start→exit→delete (true), {label}", site.lifecycle,
                        "vl", site.end)]
    # state of one running container, and its anchor's peak RSS
    state: dict[str, dict[str, object]] = {}
    rss: dict[str, dict[str, object]] = {}
    for who in EXES:
        state[who], rss[who] = site.state_and_rss(who)
    out.append({"name": f"state (one running container), {label}", **state})
    out.append({"name": f"anchor peak RSS (one running container), {label}", **rss})
    return out


@dataclass
class _Engine:
    """`run --rm true` of one engine as root, through either runtime."""

    tool: str
    env: dict[str, str]
    work: Path
    cluster_env: dict[str, str]

    def run(self, who: str, cid: str) -> None:
        """`run --rm true`; the engine writes its container id to CID.cid (for a hang)."""
        argv = (["podman", "run", "--rm", "--network", "none", *PODMAN_CRUN_ULIMITS,
                 "--runtime"] if self.tool == "podman"
                else ["docker", "run", "--rm", "--network", "none", "--runtime"])
        image = "localhost/scrun-busybox" if self.tool == "podman" else "scrun-busybox"
        call([*argv, "slurm" if who == "scrun-py" else "slurm-scrun", "--cidfile",
              f"{self.work}/{cid}.cid", image, "true"], self.env)

    def hang(self, cid: str) -> None:
        """End the hung anchor (its title is the engine's id), its job, the container."""
        try:
            engine_id = Path(f"{self.work}/{cid}.cid").read_text().strip()
        except OSError:
            return
        end_container(engine_id, self.cluster_env)
        subprocess.run([self.tool, "rm", "-f", engine_id], env=self.env, capture_output=True,
                       timeout=HANG_S, check=False)


def _engine_rows(ctx: Ctx, conf: Path) -> list[dict[str, object]]:
    """The engines as root, `true` in the test image, same configuration for both."""
    podman_env = {"PATH": ctx.env["PATH"].replace(f"{VENV}/bin:", ""), "HOME": "/root",
                  "CONTAINERS_CONF": f"{conf}/containers.conf"}
    podman = _Engine("podman", podman_env, ctx.work, ctx.env)
    out = [side_by_side(ctx, "podman run --rm true (root)", podman.run, "vp", podman.hang)]
    dockerd, docker_env = private_dockerd(conf)
    docker_env["PATH"] = podman_env["PATH"]
    docker = _Engine("docker", docker_env, ctx.work, ctx.env)
    try:
        out.append(side_by_side(ctx, "docker run --rm true (root)", docker.run, "vd",
                                docker.hang))
        subprocess.run(["docker", "rm", "-f", *subprocess.run(
            ["docker", "ps", "-aq"], env=docker_env, capture_output=True, text=True,
            check=False).stdout.split()], env=docker_env, capture_output=True, check=False)
    finally:
        dockerd.terminate()
        dockerd.wait(timeout=60)
    return out


def versus_rows(ctx: Ctx, engines: bool = True) -> list[dict[str, object]]:
    """scrun-py and Slurm's scrun side by side, same configuration, same bundles: the
    lifecycle, state and anchor RSS rows once per site configuration (CONFIGS), the
    engines' rows with the cluster's."""
    out: list[dict[str, object]] = []
    for key, label, _ in CONFIGS:
        out += _config_rows(ctx, versus_conf(ctx.work, key), label)
    if not engines:
        return out
    return out + _engine_rows(ctx, versus_conf(ctx.work))
