"""docs/policy.md's example scrun-py.toml is a valid policy with every rule in it."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import re
from pathlib import Path

from scrun_py.site import policy, site_conf

DOC = Path(__file__).resolve().parents[1] / "docs" / "policy.md"


def test_example_loads_and_sets_every_rule(tmp_path: Path) -> None:
    example = re.search(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    assert example is not None
    (tmp_path / "scrun-py.toml").write_text(example.group(1))
    site = site_conf.load(tmp_path / "slurm.conf")
    loaded = policy.load_policy(site)
    assert set(policy.KEYS) == set(site.data["policy"])
    assert not loaded.empty


def test_trust_example_is_the_systems(tmp_path: Path) -> None:
    """The [trust] example, as the system's file, pins the site's files and refuses
    SCRUN_PY_LUA."""
    from scrun_py.site import trust

    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    example = next(b for b in blocks if "[trust]" in b)
    (tmp_path / "scrun-py.toml").write_text(example)
    site = site_conf.load(tmp_path / "mine" / "slurm.conf", tmp_path / "scrun-py.toml")
    assert tmp_path / "scrun-py.toml" == site.path
    assert ("system", False) == (trust.parse(site).site_files, trust.parse(site).lua_override)
