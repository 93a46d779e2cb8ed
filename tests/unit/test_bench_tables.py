"""The benches' statistics and tables (bench/stats.py, bench/targets.py), without a
cluster: what `python bench/run.py` prints for given measurements."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from pathlib import Path

import pytest

from bench import memory, stats, targets
from bench.common import Hang

FLOOR = "srun --container true (Slurm floor)"


def _rows() -> list[dict[str, object]]:
    return [stats.timing(FLOOR, [0.1, 0.09, 0.2], None),
            stats.timing("scrun-py run", [0.2, 0.3, 0.25], FLOOR),
            stats.timing("podman run --rm true (crun, root)", [0.3], None),
            stats.timing("podman run --rm true (scrun-py, root)", [0.5], "podman run --rm "
                         "true (crun, root)", cache={"uses_added": 1, "entries_made": 0})]


def test_main_table_gives_each_row_its_ratio_to_its_floor(
        capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows()
    stats.print_rows(rows)
    assert ["| what | median | min | max | n | ratio to floor |",
            "|---|---|---|---|---|---|",
            f"| {FLOOR} | 100 ms | 90 ms | 200 ms | 3 | floor |",
            f"| scrun-py run | 250 ms | 200 ms | 300 ms | 3 | 2.50x {FLOOR} |",
            "| podman run --rm true (crun, root) | 300 ms | 300 ms | 300 ms | 1 | floor |",
            "| podman run --rm true (scrun-py, root) | 500 ms | 500 ms | 500 ms | 1 | 1.67x "
            "podman run --rm true (crun, root); cache: 1 stage_ins of 1 runs, 0 entries "
            "made |"] == capsys.readouterr().out.splitlines()
    assert "2.50x " + FLOOR == rows[1]["ratio"]


def test_versus_table_counts_the_hangs_of_slurms_scrun(
        capsys: pytest.CaptureFixture[str]) -> None:
    stats.print_versus([
        {"name": "lifecycle", "scrun-py": {**stats.summary([0.2]), "hangs": 0},
         "Slurm's scrun": {**stats.summary([0.1, 0.1]), "hangs": 1}},
        {"name": "rss", "scrun-py": {"rss_mb": 12.0, "hangs": 0},
         "Slurm's scrun": {"rss_mb": None, "hangs": 1}}])
    assert ["", "| what | scrun-py | Slurm's scrun | scrun-py / Slurm's | Slurm's scrun hangs |",
            "|---|---|---|---|---|",
            "| lifecycle | 200 ms (n=1) | 100 ms (n=2) | 2.00x | 1 of 3 |",
            "| rss | 12.0 MB | - | - | 1 of 2 |"] == capsys.readouterr().out.splitlines()


def test_engine_target_needs_every_run_staged_from_the_cache() -> None:
    met, = targets.engine_targets(_rows())
    assert True is met["met"]
    rows = _rows()
    rows[3]["cache"] = {"uses_added": 1, "entries_made": 1}
    copied, = targets.engine_targets(rows)
    assert False is copied["met"]


def test_guarded_leaves_hung_runs_out_of_the_timings() -> None:
    ids = iter(range(10))
    ended: list[str] = []

    def fn(cid: str) -> None:
        if cid in ("1", "3"):
            raise Hang(cid)

    samples, hangs = stats.guarded(fn, 3, lambda: str(next(ids)), ended.append)
    assert (2, 1, ["1", "3"]) == (len(samples), hangs, ended)  # "1" hung in the warm-up
    assert {"median_s": None, "min_s": None, "max_s": None, "n": 0} == stats.summary([])


def test_proc_kb_reads_one_line_of_a_proc_file(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nVmHWM:\t  1234 kB\nVmRSS:\t  1000 kB\n")
    assert 1234 == memory.proc_kb(str(status), "VmHWM:")
    assert 0 == memory.proc_kb(str(tmp_path / "gone"), "VmHWM:")
