"""scripts/releases.conf and the release sources of scripts/slurm-build.sh.

A release comes from Debian's source package or from an upstream tarball; a tarball is
taken from the mirror directory ($SCRUN_SLURM_MIRROR) and must match its sha256.  These
tests run slurm-build.sh's `--check` (fetch and verify only, no build) on copies of the
script with tarballs made here, so they need neither the network nor root.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "scripts" / "releases.conf"


def _lines() -> list[list[str]]:
    return [line.split() for line in CONF.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _tarball(path: Path, version: str) -> str:
    src = path.parent / f"src-{version}"
    (src / f"slurm-{version}").mkdir(parents=True)
    (src / f"slurm-{version}" / "configure").write_text("#!/bin/sh\n")
    with tarfile.open(path, "w:xz") as tar:
        tar.add(src / f"slurm-{version}", arcname=f"slurm-{version}")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _script_with(tmp_path: Path, conf: str) -> Path:
    """A copy of scripts/ whose releases.conf is `conf`."""
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("slurm-build.sh", "apt-install.sh"):
        shutil.copy(REPO / "scripts" / name, scripts / name)
    (scripts / "releases.conf").write_text(conf)
    return scripts / "slurm-build.sh"


def _available(script: Path, release: str, mirror: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCRUN_SLURM_MIRROR": str(mirror)}
    return subprocess.run(["bash", str(script), "--available", release], env=env,
                          capture_output=True, text=True, timeout=60)


def _check(script: Path, release: str, mirror: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCRUN_SLURM_MIRROR": str(mirror),
           "SCRUN_SLURM_PREFIX_ROOT": str(mirror.parent / "prefix")}
    return subprocess.run(["bash", str(script), "--check", release], env=env,
                          capture_output=True, text=True, timeout=60)


class TestReleasesConf:
    def test_every_line_is_a_known_kind(self) -> None:
        releases = [f[0] for f in _lines()]
        assert {"22.05", "24.11", "25.11", "26.05"} <= set(releases)
        assert len(releases) == len(set(releases))
        for fields in _lines():
            assert fields[1] in ("debian", "tarball"), fields
            if fields[1] == "tarball":
                assert len(fields) == 4, fields
                name, sha = fields[2:]
                assert name.startswith(f"slurm-{fields[0]}.") and ".tar." in name, fields
                assert len(sha) == 64 and int(sha, 16) >= 0, fields
            else:
                assert len(fields) == 5, fields

    def test_nothing_is_downloaded(self) -> None:
        """A release's source is Debian's or the mirror's: no script fetches a URL."""
        for name in ("slurm-build.sh", "releases.conf", "cluster.sh", "test.sh"):
            text = (REPO / "scripts" / name).read_text()
            assert "curl " not in text and "wget " not in text, name
            assert "https://" not in text and "download.schedmd" not in text, name

    def test_the_release_implemented_is_a_tarball(self) -> None:
        """26.05 (whose scrun(1) scrun-py implements) and 25.11 come from upstream."""
        kinds = {f[0]: f[1] for f in _lines()}
        assert kinds["26.05"] == kinds["25.11"] == "tarball"


class TestTarballSource:
    def test_a_matching_tarball_is_taken_from_the_mirror(self, tmp_path: Path) -> None:
        mirror = tmp_path / "mirror"
        mirror.mkdir()
        sha = _tarball(mirror / "slurm-99.05.1.tar.xz", "99.05.1")
        script = _script_with(tmp_path, "99.05 tarball slurm-99.05.1.tar.xz "
                                        f"{sha}\n")
        res = _check(script, "99.05", mirror)
        assert 0 == res.returncode, res.stderr
        assert "verified" in res.stderr

    def test_a_tarball_whose_digest_differs_is_refused(self, tmp_path: Path) -> None:
        mirror = tmp_path / "mirror"
        mirror.mkdir()
        sha = _tarball(mirror / "slurm-99.05.1.tar.xz", "99.05.1")
        wrong = ("0" if sha[0] != "0" else "1") + sha[1:]
        script = _script_with(tmp_path, "99.05 tarball slurm-99.05.1.tar.xz "
                                        f"{wrong}\n")
        res = _check(script, "99.05", mirror)
        assert 1 == res.returncode
        last = res.stderr.strip().splitlines()[-1]
        assert f"sha256 {sha} differs from releases.conf's {wrong}: refused" in last
        assert not (tmp_path / "prefix" / "99.05").exists()

    def test_a_missing_tarball_is_one_line_and_no_download(self, tmp_path: Path) -> None:
        mirror = tmp_path / "mirror"
        mirror.mkdir()
        script = _script_with(tmp_path, f"99.05 tarball slurm-99.05.1.tar.xz {'a' * 64}\n")
        res = _check(script, "99.05", mirror)
        assert 1 == res.returncode
        want = "Slurm 99.05: not tested here: no slurm-99.05.1.tar.xz in SCRUN_SLURM_MIRROR"
        assert res.stderr.strip().splitlines() == [f"slurm-build: {want}"]
        avail = _available(script, "99.05", mirror)
        assert (1, want) == (avail.returncode, avail.stdout.strip())

    def test_a_release_is_available_with_its_tarball_or_from_debian(
            self, tmp_path: Path) -> None:
        mirror = tmp_path / "mirror"
        mirror.mkdir()
        sha = _tarball(mirror / "slurm-99.05.1.tar.xz", "99.05.1")
        script = _script_with(tmp_path, f"99.05 tarball slurm-99.05.1.tar.xz {sha}\n"
                                        "98.11 debian slurm-wlm 98.11.1-1 trixie\n")
        for rel in ("99.05", "98.11"):
            res = _available(script, rel, mirror)
            assert (0, "") == (res.returncode, res.stdout), res.stderr

    @pytest.mark.parametrize("line, word", [
        ("99.05 zip slurm-99.05.1.zip abc", "unknown source kind 'zip'"),
        ("99.05 tarball slurm-99.05.1.tar.xz short", "want 'tarball"),
        (f"99.05 tarball slurm-99.05.1.tar.xz {'a' * 64} https://x/y", "want 'tarball"),
    ])
    def test_a_bad_line_is_refused(self, tmp_path: Path, line: str, word: str) -> None:
        script = _script_with(tmp_path, line + "\n")
        res = _check(script, "99.05", tmp_path)
        assert 2 == res.returncode
        assert word in res.stderr

    def test_the_shared_mirror_matches_releases_conf(self) -> None:
        """Where a mirror is configured (CI's), each tarball line's file is there and
        matches: the digests of releases.conf are the real ones."""
        mirror = os.environ.get("SCRUN_SLURM_MIRROR")
        if not mirror:
            pytest.skip("SCRUN_SLURM_MIRROR is not set")
        for fields in _lines():
            path = Path(mirror, fields[2])
            if fields[1] != "tarball" or not path.is_file():
                continue
            assert hashlib.sha256(path.read_bytes()).hexdigest() == fields[3], path

    @pytest.mark.parametrize("release", [f[0] for f in _lines() if f[1] == "tarball"])
    def test_a_tarball_release_is_tested_when_the_mirror_has_it(self, release: str) -> None:
        """The releases built from SchedMD's tarballs are tested where the mirror holds
        them; elsewhere this skip (allowed) names the release that is not tested."""
        res = subprocess.run(["bash", str(REPO / "scripts" / "slurm-build.sh"), "--available",
                              release], capture_output=True, text=True, timeout=60)
        if res.returncode == 1 and res.stdout.startswith(f"Slurm {release}: not tested here"):
            pytest.skip(res.stdout.strip())
        assert 0 == res.returncode, res.stdout + res.stderr
