"""What scrun-py reads from slurm.conf itself (slurm/conf.py)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from pathlib import Path

import pytest

from scrun_py.slurm import conf


class TestClusterName:
    @pytest.mark.parametrize(("text", "expected"), [
        ("ClusterName=cl\n", "cl"), ("# test\nClusterName=cl  # c\n", "cl"),
        ("  clustername = Big#x\n", "Big"), ("CLUSTERNAME=a\nClusterName=b\n", "a"),
        ("ClusterNameX=a\n", None), ("ClusterName=\nClusterName=b\n", "b"),
        ("#ClusterName=a\n", None), ("", None)])
    def test_parse(self, text: str, expected: str | None) -> None:
        assert expected == conf.parse_cluster_name(text)

    def test_file(self, tmp_path: Path) -> None:
        (tmp_path / "slurm.conf").write_text("ClusterName=cl\n")
        assert "cl" == conf.cluster_name(tmp_path / "slurm.conf")
        assert "cl" == conf.cluster_name(str(tmp_path / "slurm.conf"))

    def test_no_file(self, tmp_path: Path) -> None:
        assert conf.cluster_name(tmp_path / "missing") is None
        assert conf.cluster_name(None) is None
