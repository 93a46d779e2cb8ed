"""The main table's own rows: scrun-py's lifecycle, `run`, `state`, `--version` and
`kill`, each next to its floor (crun run / state, srun --container)."""

from __future__ import annotations

import subprocess

from bench.common import SCRUN, Ctx, as_user, create_bounded, run, wait_gone
from bench.stats import timed, timing

SLURM_FLOOR = "srun --container true (Slurm floor)"


class Floors:
    """The calls the rows time, as the test user, with scrun-py's --root `root`."""

    def __init__(self, ctx: Ctx, root: str) -> None:
        self.ctx = ctx
        self.root = root
        self.base = as_user(ctx.pw, [SCRUN, "--root", root])
        self.crun = as_user(ctx.pw, ["crun", "--rootless=true", f"--root={ctx.work}/crunstate"])

    def run(self, argv: list[str]) -> None:
        run(argv, self.ctx.env)

    def crun_run(self) -> None:
        cid = f"b{next(self.ctx.counter)}"
        self.run([*self.crun, "run", "--bundle", str(self.ctx.work / "true"), cid])

    def srun_container(self) -> None:
        self.run(as_user(self.ctx.pw, ["srun", f"--container={self.ctx.work / 'true'}",
                                       "true"]))

    def lifecycle(self) -> None:
        cid = f"l{next(self.ctx.counter)}"
        work = self.ctx.work
        anchor = create_bounded(self.base, self.ctx.env, work / "true", work / f"{cid}.pid",
                                cid)
        self.run([*self.base, "start", cid])
        wait_gone(anchor, f"anchor {cid}")
        self.run([*self.base, "delete", cid])

    def scrun_run(self) -> None:
        cid = f"r{next(self.ctx.counter)}"
        self.run(as_user(self.ctx.pw, [SCRUN, "--root", self.root, "run", "--bundle",
                                       str(self.ctx.work / "true"), cid]))


def container_rows(floors: Floors) -> list[dict[str, object]]:
    """crun run and srun --container (the floors), scrun-py's lifecycle and run."""
    n = floors.ctx.n
    return [timing("crun run true (OCI floor)", timed(floors.crun_run, n), None),
            timing(SLURM_FLOOR, timed(floors.srun_container, n), None),
            timing("scrun-py create→start→exit→delete", timed(floors.lifecycle, n),
                   SLURM_FLOOR),
            timing("scrun-py run", timed(floors.scrun_run, n), SLURM_FLOOR)]


def short_command_rows(floors: Floors) -> list[dict[str, object]]:
    """Short commands against one running container: `state` (crun's the floor),
    `--version` and `kill` (WINCH)."""
    ctx, base, n = floors.ctx, floors.base, floors.ctx.n
    create_bounded(base, ctx.env, ctx.work / "sleep", ctx.work / "s.pid", "s")
    floors.run([*base, "start", "s"])
    subprocess.run([*floors.crun, "create", "--bundle", str(ctx.work / "sleep"), "cs"],
                   env=ctx.env, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    rows = [timing("crun state", timed(lambda: floors.run([*floors.crun, "state", "cs"]),
                                       n * 3), None),
            timing("scrun-py state", timed(lambda: floors.run([*base, "state", "s"]), n * 3),
                   "crun state"),
            timing("scrun-py --version",
                   timed(lambda: floors.run(as_user(ctx.pw, [SCRUN, "--version"])), n * 3),
                   "crun state"),
            timing("scrun-py kill (SIGWINCH, running)",
                   timed(lambda: floors.run([*base, "kill", "s", "WINCH"]), n), "crun state")]
    floors.run([*base, "delete", "--force", "s"])
    subprocess.run([*floors.crun, "delete", "--force", "cs"], env=ctx.env, check=False)
    return rows
