"""Side-by-side benchmark: scrun-py against its floors, measured in one run.

    sudo scripts/cluster.sh up && sudo /opt/scrun-py/venv/bin/python bench/run.py [-n N]

(`python -m bench.run` from the checkout is the same.)  The command line and the run's
order; each bench is a module of this package (bench/__init__.py).

Prints a Markdown table (median, min, max, ratio to the floor) and writes
bench/results/latest.json.  Runs as the ordinary test user, like a real site; the
`podman run --rm` / `docker run --rm` rows run the engines of `scripts/engines.sh` as root,
and podman also rootless as the test user, each against the same command with its plain
runtime (crun, runc), and the `docker exec c true` row against runc's; `--engines-only`
runs only these rows.

Where the release under test has Slurm's own scrun (23.02 and later:
`$SCRUN_TEST_SLURM_PREFIX/bin/scrun` for a built release, /usr/bin/scrun when packaged),
the same rows run through it side by
side: lifecycle, `state`, anchor RSS, and `podman`/`docker run --rm` (a private dockerd
with both runtimes registered), scrun-py and Slurm's scrun each given the same
configuration directory (shared-filesystem scrun.lua, oci.conf with SrunPath).  Every
call of Slurm's scrun has a timeout: a hang is counted, its anchor and job ended, and
the run left out of the timings (never retried).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/run.py`: the checkout, not bench/, is where the package `bench` is found
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import atexit
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time

from bench import backends, crowd, images, site_install
from bench.common import (
    HANG_S,
    RESULTS,
    SCRUN,
    SLURM_BIN,
    USER,
    VENV,
    Ctx,
    make_bundle,
    slurm_scrun,
    slurm_version,
    user_env,
)
from bench.engines import engine_rows, exec_rows
from bench.floors import Floors, container_rows, short_command_rows
from bench.load import concurrent_runs, lifecycles
from bench.memory import memory
from bench.stats import print_load_rows, print_rows, print_target_table, print_versus
from bench.targets import engine_targets, print_targets
from bench.versus import versus_conf, versus_rows


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10, help="runs per timed row")
    ap.add_argument("--lifecycles", type=int, default=100,
                    help="lifecycles counted for failures and hangs")
    ap.add_argument("--many", type=int, default=50,
                    help="containers running at once for the memory row")
    ap.add_argument("--concurrent", type=int, default=500,
                    help="`scrun-py run` started at once")
    ap.add_argument("--skip-engines", action="store_true",
                    help="no podman/docker rows, `docker exec` included (both tables)")
    ap.add_argument("--versus-only", action="store_true",
                    help="only the rows against Slurm's own scrun")
    ap.add_argument("--engines-only", action="store_true",
                    help="only the podman/docker rows of the main table, `docker exec` "
                         "included (no results file)")
    ap.add_argument("--backends-only", action="store_true",
                    help="only the Slurm backends side by side (bench/backends.py), "
                         "written to results/backends.json")
    ap.add_argument("--images", action="store_true",
                    help="only the real-size images through the staging scripts on the "
                         "site cluster (bench/images.py), written to "
                         "results/images-RELEASE.json")
    ap.add_argument("--tools", default="docker,podman",
                    help="--images: the engines, comma-separated (another set than both "
                         "writes results/images-RELEASE-TOOLS.json)")
    ap.add_argument("--crowd", type=int, default=0, metavar="N",
                    help="only the login node's memory with N containers of sleep running "
                         "through scrun-py, then through Slurm's scrun (bench/crowd.py), "
                         "written to results/crowd-RELEASE.json")
    ap.add_argument("--example-on-scrun-py", action="store_true",
                    help="--images: also scrun-py running the rsync example")
    ap.add_argument("--first", type=int, default=2,
                    help="--images: first runs (the staging cache emptied) per runtime")
    ap.add_argument("--install", choices=("site", "venv"), default="site",
                    help="site (the default): pip-install this checkout as the test user "
                         "into a fresh virtualenv, as a site does (bench/site_install.py); "
                         "venv: the virtualenv SCRUN_TEST_VENV names (the test one)")
    return ap.parse_args()


def reexec_in_site_install(pw: pwd.struct_passwd) -> None:
    """Install scrun-py as a site does, then run again on that virtualenv, with the
    module's paths (VENV, SCRUN) naming it."""
    venv = site_install.make(pw)
    os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:], "--install",
                               "venv"], {**os.environ, "SCRUN_TEST_VENV": str(venv),
                                         "SCRUN_BENCH_BACKENDS_SCRUN": SCRUN})


def prepare(pw: pwd.struct_passwd, n: int) -> Ctx:
    """The work directory with the bundles `true` and `sleep`, owned by the test user,
    and the site's configuration every row runs with."""
    env = user_env(pw)
    work = Path(tempfile.mkdtemp(prefix="scrun-bench-", dir="/tmp"))
    atexit.register(shutil.rmtree, work, True)  # also when a row fails
    os.chmod(work, 0o755)
    # podman runs the runtime in podman's working directory: a scrun_py package found
    # there must never be the one that runs
    os.chdir(work)
    make_bundle(work / "true", ["true"])
    make_bundle(work / "sleep", ["sleep", "600"])
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", str(work)], check=True)
    # every row runs with the site's configuration: the cluster's slurm.conf and oci.conf
    # beside a scrun.lua whose hooks log (lua/scrun.lua), as a site has
    env["SLURM_CONF"] = str(versus_conf(work) / "slurm.conf")
    return Ctx(pw, env, work, n, iter(range(10**9)))


def write_results(name: str, **data: object) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / name).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), **data},
                                           indent=2))


def engines_only(ctx: Ctx) -> None:
    rows = engine_rows(ctx.pw, ctx.n) + exec_rows(ctx.n)
    print_rows(rows)
    print_target_table(engine_targets(rows))


def backends_only(ctx: Ctx) -> None:
    by_backend = backends.rows(ctx)
    backends.print_rows(by_backend)
    write_results("backends.json", slurm=slurm_version(ctx.env), backends=by_backend)


def versus_only(ctx: Ctx, engines: bool) -> None:
    if not slurm_scrun():
        raise SystemExit(f"no Slurm scrun in {SLURM_BIN}")
    versus = versus_rows(ctx, engines)
    print_versus(versus)
    write_results(f"versus-{os.environ.get('SCRUN_TEST_SLURM', 'unknown')}.json",
                  slurm=slurm_version(ctx.env), versus_slurm_scrun=versus)


def images_only(ctx: Ctx, first: int, tools: str, example_on_py: bool) -> None:
    images.TOOLS[:] = tools.split(",")
    if example_on_py:
        images.RUNTIMES.clear()
        images.RUNTIMES.update(images.ALL_RUNTIMES)
    name = f"images-{os.environ.get('SCRUN_TEST_SLURM', 'unknown')}"
    if tools != "docker,podman":
        name += "-" + tools.replace(",", "-")
    version = slurm_version(ctx.env)
    images.images_rows(ctx, first, lambda got: write_results(f"{name}.json", slurm=version,
                                                               **got))


def crowd_only(ctx: Ctx, count: int) -> None:
    if not slurm_scrun():
        raise SystemExit(f"no Slurm scrun in {SLURM_BIN}")
    row = crowd.crowd_rows(ctx, versus_conf(ctx.work), count)
    crowd.print_row(row)
    write_results(f"crowd-{os.environ.get('SCRUN_TEST_SLURM', 'unknown')}.json",
                  slurm=slurm_version(ctx.env), crowd=row)


def everything(ctx: Ctx, opts: argparse.Namespace) -> None:
    """Both tables, the backends and the targets; bench/results/latest.json."""
    floors = Floors(ctx, str(ctx.work / "root"))
    rows = container_rows(floors)
    if not opts.skip_engines:
        rows += engine_rows(ctx.pw, ctx.n) + exec_rows(ctx.n)
    rows += short_command_rows(floors)
    life = lifecycles(ctx.env, floors.base, ctx.work, opts.lifecycles, ctx.counter)
    mem = [memory(ctx.env, floors.base, ctx.work, 1, "m1-"),
           memory(ctx.env, floors.base, ctx.work, opts.many, "mm-")]
    conc = concurrent_runs(ctx.pw, ctx.env, floors.root, ctx.work, opts.concurrent)
    versus = versus_rows(ctx, not opts.skip_engines) if slurm_scrun() else []
    by_backend = backends.rows(ctx)
    print_rows(rows)
    print_load_rows(life, mem, conc, HANG_S)
    if versus:
        print_versus(versus)
    backends.print_rows(by_backend)
    targets = print_targets(rows, versus, life, mem, conc)
    write_results("latest.json", slurm=slurm_version(ctx.env), rows=rows, lifecycles=life,
                  memory=mem, concurrent=conc, versus_slurm_scrun=versus,
                  backends=by_backend, targets=targets)


def main() -> None:
    opts = parse_args()
    pw = pwd.getpwnam(USER)
    if opts.install == "site":
        reexec_in_site_install(pw)
    print(f"[bench] scrun-py of {VENV}", flush=True)
    ctx = prepare(pw, opts.n)
    if opts.engines_only:
        engines_only(ctx)
    elif opts.backends_only:
        backends_only(ctx)
    elif opts.images:
        images_only(ctx, opts.first, opts.tools, opts.example_on_scrun_py)
    elif opts.crowd:
        crowd_only(ctx, opts.crowd)
    elif opts.versus_only:
        versus_only(ctx, not opts.skip_engines)
    else:
        everything(ctx, opts)
    shutil.rmtree(ctx.work, ignore_errors=True)


if __name__ == "__main__":
    main()
