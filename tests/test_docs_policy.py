"""docs/policy.md's example scrun-py.toml is a valid policy with every rule in it."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import re
from pathlib import Path

from scrun_py import policy, site_conf

DOC = Path(__file__).resolve().parents[1] / "docs" / "policy.md"


def test_example_loads_and_sets_every_rule(tmp_path: Path) -> None:
    example = re.search(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    assert example is not None
    (tmp_path / "scrun-py.toml").write_text(example.group(1))
    site = site_conf.load(tmp_path / "slurm.conf")
    loaded = policy.load_policy(site)
    assert set(policy.KEYS) == set(site.data["policy"])
    assert not loaded.empty
