"""The engines: `podman run --rm` / `docker run --rm` of `true` through scrun-py next to
the plain runtime, with the stage_ins the staging cache served, and `docker exec`."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from functools import partial
from pathlib import Path

from bench.common import HANG_S, PODMAN_CRUN_ULIMITS, as_user, engine_env, run
from bench.stats import timed, timing

EXEC_FLOOR = "docker exec c true (runc, root)"


def cache_uses(uid: int) -> dict[str, int]:
    """The staging script's cache of a user (the shipped CACHE_BASE, /tmp/scrun-cache-%u):
    entry key -> how many stage_ins used it."""
    found: dict[str, int] = {}
    entries = Path(f"/tmp/scrun-cache-{uid}") / "entries"
    if entries.is_dir():
        for entry in entries.iterdir():
            try:
                found[entry.name] = int((entry / "uses").read_text())
            except (OSError, ValueError):
                found[entry.name] = 0
    return found


def _engines(pw: pwd.struct_passwd,
             eng: dict[str, str]) -> tuple[tuple[str, str, int, list[str], dict[str, str],
                                                 str], ...]:
    """(tool, who, uid, argv, env, plain runtime) of each engine row: podman and docker as
    root, podman rootless as the test user with the environment the engine tests give
    it (its own vfs store)."""
    user = {k: v for k, v in eng.items() if k != "DOCKER_HOST"}
    user.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name,
                XDG_RUNTIME_DIR=f"/run/user/{pw.pw_uid}",
                PODMAN_IGNORE_CGROUPSV1_WARNING="1")
    podman = ["podman", "run", "--rm", "--network", "none"]
    # rootless podman passes the user's own limits, which crun can set
    return (("podman", "root", 0, [*podman, *PODMAN_CRUN_ULIMITS], eng, "crun"),
            ("docker", "root", 0, ["docker", "run", "--rm", "--network", "none"], eng,
             "runc"),
            ("podman", "rootless", pw.pw_uid, as_user(pw, podman), user, "crun"))


def engine_rows(pw: pwd.struct_passwd, n: int) -> list[dict[str, object]]:
    """`podman run --rm` / `docker run --rm` of `true` in the test image, through the
    engines' configuration of scripts/engines.sh (runtime `slurm`: scrun-py with
    lua/scrun-staging.lua, its cache on), each next to the same command with the plain
    runtime: as root, and podman rootless as the test user.  The image ran before the
    timed runs (the warm-up), so each of them should stage from the cache entry: the row
    counts the stage_ins its runs added to the user's cache and the entries they made."""
    eng = engine_env()
    image = eng.get("SCRUN_TEST_IMAGE", "scrun-busybox")
    out: list[dict[str, object]] = []
    for tool, who, uid, argv, env, plain in _engines(pw, eng):
        img = f"localhost/{image}" if tool == "podman" else image
        base_row = f"{tool} run --rm true ({plain}, {who})"
        out.append(timing(base_row, timed(partial(run, [*argv, "--runtime", plain, img,
                                                         "true"], env), n), None))
        ours = partial(run, [*argv, "--runtime", "slurm", img, "true"], env)
        for _ in range(2):
            ours()
        before = cache_uses(uid)
        samples = timed(ours, n, warmup=0)
        after = cache_uses(uid)
        out.append(timing(f"{tool} run --rm true (scrun-py, {who})", samples, base_row,
                          cache={"uses_added": sum(v - before.get(k, 0)
                                                   for k, v in after.items()),
                                 "entries_made": len(set(after) - set(before))}))
    return out


def _exec_samples(eng: dict[str, str], image: str, runtime: str, n: int) -> list[float]:
    """`n` timed `docker exec c true` into a `sleep 600` container of `runtime`."""
    name = f"scrun-bench-exec-{runtime}-{os.getpid()}"
    run(["docker", "run", "-d", "--network", "none", "--runtime", runtime, "--name",
         name, image, "sleep", "600"], eng)
    try:
        deadline = time.monotonic() + HANG_S
        while subprocess.run(["docker", "exec", name, "true"], env=eng,
                             capture_output=True, timeout=HANG_S,
                             check=False).returncode != 0:
            if time.monotonic() > deadline:
                who = "runc" if runtime == "runc" else "scrun-py"
                raise RuntimeError(f"docker exec into {name} ({who}) never succeeded")
            time.sleep(0.2)
        return timed(partial(run, ["docker", "exec", name, "true"], eng), n)
    finally:
        subprocess.run(["docker", "rm", "-f", name], env=eng, capture_output=True,
                       timeout=HANG_S, check=False)


def exec_rows(n: int) -> list[dict[str, object]]:
    """`docker exec c true` into a running container (`sleep 600` in the test image), as
    root with the engines of scripts/engines.sh: through runc (plain docker, the floor)
    and through scrun-py (runtime `slurm`: each exec a helper step of the container's
    job, on its node).  The first exec that succeeds is the sign the container runs;
    then 2 warm-up runs and `n` timed ones."""
    eng = engine_env()
    image = eng.get("SCRUN_TEST_IMAGE", "scrun-busybox")
    return [timing(f"docker exec c true ({who}, root)", _exec_samples(eng, image, runtime, n),
                   None if runtime == "runc" else EXEC_FLOOR)
            for who, runtime in (("runc", "runc"), ("scrun-py", "slurm"))]
