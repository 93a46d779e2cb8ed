"""scrun_py.oci.taskenv: the task's Slurm variables worked out from the step's layout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.oci import taskenv

# the environment slurmstepd 22.05 writes into a 3-node container step's config.json
STEP_ENV = {"SLURM_STEP_NODELIST": "n[1-3]", "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
            "SLURM_NTASKS": "3", "SLURM_JOB_NODELIST": "n[1-3]"}


def test_hostlist() -> None:
    assert ["n1", "n2", "n3", "login", "a08", "a09", "a10", "c5"] == taskenv.expand_hostlist(
        "n[1-3],login,a[08-10],c[5]")


def test_hostlist_not_understood() -> None:
    with pytest.raises(taskenv.LayoutError):
        taskenv.expand_hostlist("n[1-x]")


def test_counts() -> None:
    assert [2, 2, 2, 1] == taskenv.expand_counts("2(x3),1")
    with pytest.raises(taskenv.LayoutError):
        taskenv.expand_counts("two")


def test_layouts() -> None:
    # as 24.11 reported them for srun -N3 -n6 (block): n1 0,1  n2 2,3  n3 4,5
    assert [[0, 1], [2, 3], [4, 5]] == taskenv.task_ids([2, 2, 2], "")
    assert [[0, 1], [2, 3], [4]] == taskenv.task_ids([2, 2, 1], "block:cyclic")
    assert [[0, 3], [1, 4], [2]] == taskenv.task_ids([2, 2, 1], "cyclic")
    assert [[0, 1, 4], [2, 3, 5]] == taskenv.task_ids([3, 3], "plane", "2")
    assert [[0, 1, 4], [2, 3, 5]] == taskenv.task_ids([3, 3], "plane=2")
    # one task per node: the rank is the node's place whatever the distribution
    assert [[0], [1], [2]] == taskenv.task_ids([1, 1, 1], "cyclic")


def test_arbitrary_is_unknown() -> None:
    with pytest.raises(taskenv.LayoutError, match="arbitrary"):
        taskenv.task_ids([1, 1], "arbitrary")


def test_task_env_adds_only_what_is_missing() -> None:
    assert {"SLURMD_NODENAME": "n2", "SLURM_NODEID": "1", "SLURM_LOCALID": "0",
            "SLURM_PROCID": "1", "SLURM_GTIDS": "1"} == taskenv.task_env(STEP_ENV, "n2", 0)
    present = {**STEP_ENV, "SLURM_PROCID": "7", "SLURMD_NODENAME": "n2"}
    assert "SLURM_PROCID" not in taskenv.task_env(present, "n2", 0)


def test_task_env_unknown_node() -> None:
    with pytest.raises(taskenv.LayoutError, match="n9"):
        taskenv.task_env(STEP_ENV, "n9", 0)


def _bundle(tmp_path: Path, env: dict[str, str]) -> Path:
    cfg = {"process": {"args": ["sh"], "env": [f"{k}={v}" for k, v in env.items()]},
           "root": {"path": "/r"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_rewrite_config(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, STEP_ENV)
    added = taskenv.rewrite_config(str(bundle), "n3", 0)
    assert ["SLURMD_NODENAME", "SLURM_GTIDS", "SLURM_LOCALID", "SLURM_NODEID",
            "SLURM_PROCID"] == added
    env = json.loads((bundle / "config.json").read_text())["process"]["env"]
    assert "SLURM_PROCID=2" in env and "SLURM_NODEID=2" in env
    assert ["config.json"] == [p.name for p in bundle.iterdir()]


def test_rewrite_config_leaves_a_complete_env_alone(tmp_path: Path) -> None:
    env = {**STEP_ENV, "SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_LOCALID": "0"}
    bundle = _bundle(tmp_path, env)
    before = (bundle / "config.json").read_text()
    assert [] == taskenv.rewrite_config(str(bundle), "n1", 0)
    assert before == (bundle / "config.json").read_text()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrun_py.oci.taskenv", *args],
                          capture_output=True, text=True, timeout=30)


def test_main_runs_the_command(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, STEP_ENV)
    res = _run("n1", "0", str(bundle), "--", "sh", "-c", "echo ran; exit 3")
    assert (3, "ran\n", "") == (res.returncode, res.stdout, res.stderr)
    assert "SLURM_PROCID=0" in (bundle / "config.json").read_text()


def test_main_warns_and_still_runs(tmp_path: Path) -> None:
    res = _run("n1", "0", str(tmp_path), "--", "echo", "ran")
    assert 0 == res.returncode and "ran\n" == res.stdout
    assert res.stderr.startswith("taskenv: warning: task variables not added:")
    assert 1 == len(res.stderr.splitlines())


def test_main_usage() -> None:
    res = _run("n1", "x", "/b", "crun")
    assert 1 == res.returncode and res.stderr.startswith("taskenv: usage:")
    res = _run("n1", "0", "/nonexistent", "--", "/nonexistent/crun")
    assert 127 == res.returncode
    assert res.stderr.splitlines()[-1].startswith("taskenv: cannot run /nonexistent/crun")
