"""[staging] of scrun-py.toml (site/staging_conf.py): each key checked, a bad value one
line naming the file, the key and what it must be; create refuses a bad table."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from pathlib import Path

import pytest

from scrun_py.base.errors import ConfigError
from scrun_py.site import site_conf, staging_conf


def load(tmp_path: Path, text: str) -> site_conf.SiteConf:
    (tmp_path / "scrun-py.toml").write_text(text)
    return site_conf.load(tmp_path / "slurm.conf", system=tmp_path / "none.toml")


def test_every_key(tmp_path: Path) -> None:
    site = load(tmp_path, '[staging]\nbase = "/s/%u"\ncache = false\ncache_base = "/c/%u"\n'
                'cache_max_mb = 10\ncache_key = "content"\ntask_uppers = false\n'
                'sync_back = false\nshared_paths = ["/home", "/scratch"]\n')
    assert {"base": "/s/%u", "cache": False, "cache_base": "/c/%u", "cache_max_mb": 10,
            "cache_key": "content", "task_uppers": False, "sync_back": False,
            "shared_paths": ["/home", "/scratch"]} == staging_conf.settings(site)


def test_absent_is_empty(tmp_path: Path) -> None:
    assert {} == staging_conf.settings(load(tmp_path, "[exec]\n"))


@pytest.mark.parametrize(("line", "message"), [
    ('base = "relative"', "[staging] base: must be an absolute path"),
    ("cache = 1", "[staging] cache: must be true or false"),
    ("cache_max_mb = 0", "[staging] cache_max_mb: must be a positive whole number of MB"),
    ("cache_max_mb = true", "[staging] cache_max_mb: must be a positive whole number of MB"),
    ('cache_key = "sha"', "[staging] cache_key: must be one of auto, metadata, content"),
    ('shared_paths = "/home"', "[staging] shared_paths: must be a list of absolute paths "
                               "other than /"),
    ('shared_paths = ["/"]', "[staging] shared_paths: must be a list of absolute paths "
                             "other than /"),
    ('shared_paths = ["//"]', "[staging] shared_paths: must be a list of absolute paths "
                              "other than /"),
    ("shared_path = []", "[staging]: unknown key shared_path"),
])
def test_bad_values(tmp_path: Path, line: str, message: str) -> None:
    site = load(tmp_path, f"[staging]\n{line}\n")
    with pytest.raises(ConfigError) as err:
        staging_conf.settings(site)
    assert f"{tmp_path / 'scrun-py.toml'}: {message}" == str(err.value)
