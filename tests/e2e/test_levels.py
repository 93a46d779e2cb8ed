"""Every diagnostics level scrun(1) documents, set from every place a level can be set,
leaves the container working: create, start, the exit code and delete, on the real
cluster (each of these once crashed `create`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import SCRUN, Env, leftovers, wait_anchor

pytestmark = pytest.mark.e2e

# (environment, global flags, oci.conf lines) -> one run each
CASES = {
    "SCRUN_DEBUG=debug2": ({"SCRUN_DEBUG": "debug2"}, (), ""),
    "SCRUN_DEBUG=verbose": ({"SCRUN_DEBUG": "verbose"}, (), ""),
    "SCRUN_STDERR_DEBUG=debug3": ({"SCRUN_STDERR_DEBUG": "debug3"}, (), ""),
    "SCRUN_FILE_DEBUG=debug5": ({"SCRUN_FILE_DEBUG": "debug5"}, (), ""),
    "-vvv": ({}, ("-vvv",), ""),
    "--log-level debug3": ({}, ("--log-level", "debug3"), ""),
    "StdIODebug=debug2": ({}, (), 'StdIODebug="debug2"\nFileDebug="debug4"\n'),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_level_keeps_the_container_working(user_env: Env, conf_dir: Path, case: str) -> None:
    extra_env, flags, oci_lines = CASES[case]
    env = user_env
    if oci_lines:
        (conf_dir / "oci.conf").write_text((conf_dir / "oci.conf").read_text() + oci_lines)
    bundle = env.bundle(["sh", "-c", "echo out; exit 4"])

    def scrun(*args: str, stdio: tuple[int, int] | None = None,
              ) -> subprocess.CompletedProcess[str]:
        argv = [str(SCRUN), *flags, "--root", str(env.root), "--log", str(env.log),
                "--log-format", "json", "-f", str(conf_dir / "slurm.conf"), *args]
        out, err = stdio or (subprocess.PIPE, subprocess.PIPE)
        return subprocess.run(env.user.argv(argv), env=env.user.env(**extra_env),
                              stdout=out, stderr=err, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    # the anchor keeps create's stdout and stderr (the container's): files, not pipes
    out_file, err_file = env.work / "lvl.out", env.work / "lvl.err"
    with open(out_file, "w") as out, open(err_file, "w") as err:
        create = scrun("create", "--bundle", str(bundle.path), "--pid-file",
                       str(env.work / "lvl.pid"), "lvl", stdio=(out.fileno(), err.fileno()))
    assert 0 == create.returncode, err_file.read_text()
    anchor = int((env.work / "lvl.pid").read_text())
    env.anchors.append(anchor)
    job = json.loads((env.root / "lvl" / "state.json").read_text())["job_id"]
    start = scrun("start", "lvl")
    assert 0 == start.returncode, start.stderr
    assert 4 == wait_anchor(anchor)
    assert "out\n" in out_file.read_text()
    delete = scrun("delete", "lvl")
    assert 0 == delete.returncode, delete.stderr
    assert "Traceback" not in delete.stderr + start.stderr + err_file.read_text()
    assert [] == leftovers(env, "lvl", [int(job)])
    assert [] == [r for r in env.log_records() if r.get("level") == "error"]
