"""`scrun-py example [NAME]`: the example site files the package carries, printed byte
for byte; the list without NAME; one line and exit 2 for a name there is none of.  The
scrun-py.toml example puts nothing in force as shipped, and with every setting
uncommented it is a file scrun-py accepts that names every key of every table."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from scrun_py.base.layout import TRUST_KEYS
from scrun_py.commands import examples
from scrun_py.site import audit, policy, site_conf, staging_conf, trust
from tests.unit.cli_run import run

REPO = Path(__file__).resolve().parents[2]
#: each example and the file of the source tree the scripts and tests read
SOURCES = {"oci.conf": REPO / "oci.conf.example", "scrun.lua": REPO / "lua" / "scrun.lua",
           "scrun-staging.lua": REPO / "lua" / "scrun-staging.lua",
           "scrun-py.toml": REPO / "scrun_py" / "examples" / "scrun-py.toml"}


def uncommented(text: str) -> str:
    """The example with every setting in force: `#key = …` and `#[table]` lose their '#';
    the explanations (`# …`) go."""
    lines = []
    for line in text.splitlines():
        if line.startswith("#") and not line.startswith("# ") and line != "#":
            lines.append(line[1:])
    return "\n".join(lines) + "\n"


class TestVerb:
    @pytest.mark.parametrize("name", sorted(SOURCES))
    def test_prints_the_file(self, name: str, capfd: pytest.CaptureFixture[bytes]) -> None:
        """`example NAME` prints the file byte for byte, exit 0; the package's file is the
        source tree's (oci.conf.example, lua/)."""
        assert 0 == run(["example", name])
        out, err = capfd.readouterr()
        assert (SOURCES[name].read_text(), "") == (out, err)
        assert out.strip()

    def test_file_name_too(self, capfd: pytest.CaptureFixture[str]) -> None:
        """The packaged file's own name is taken as well: oci.conf.example."""
        assert 0 == run(["example", "oci.conf.example"])
        assert SOURCES["oci.conf"].read_text() == capfd.readouterr().out

    def test_list(self, capfd: pytest.CaptureFixture[str]) -> None:
        """Without NAME: every name at the start of a line, where it goes, exit 0."""
        assert 0 == run(["example"])
        out = capfd.readouterr().out
        starts = [line.split()[0] for line in out.splitlines() if line[:1].isalnum()]
        assert sorted([*SOURCES, "scrun-py"]) == sorted(starts)  # and the usage line
        assert "scrun-py example oci.conf > /etc/slurm/oci.conf" in out
        assert out.count("beside slurm.conf") == len(SOURCES)

    @pytest.mark.parametrize("name", ["nope", "../pyproject.toml", "", "slurm.conf"])
    def test_unknown(self, name: str, capfd: pytest.CaptureFixture[str]) -> None:
        """A name there is no example of: one line naming the choices, exit 2."""
        assert 2 == run(["example", name])
        out, err = capfd.readouterr()
        assert "" == out
        assert [f"scrun-py: no example named {name!r}: choose one of oci.conf, scrun.lua, "
                "scrun-staging.lua, scrun-py.toml"] == err.splitlines()

    def test_missing_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capfd: pytest.CaptureFixture[str]) -> None:
        """A package without its data (a broken install): one line, exit 1."""
        monkeypatch.setattr(examples, "examples_dir", lambda: str(tmp_path))
        assert 1 == run(["example", "scrun.lua"])
        err = capfd.readouterr().err
        assert 1 == len(err.splitlines())
        assert f"cannot read {tmp_path}/scrun.lua: No such file or directory" in err

    def test_in_the_package(self) -> None:
        """The files are in scrun_py/examples/, the wheel's package data."""
        assert REPO / "scrun_py" / "examples" == Path(examples.examples_dir())
        for e in examples.EXAMPLES:
            assert (Path(examples.examples_dir()) / e.file).is_file(), e.file


class TestSiteFileExample:
    TEXT = SOURCES["scrun-py.toml"].read_text()

    def test_nothing_in_force_as_shipped(self) -> None:
        """Copied as it is, the file sets nothing (an empty [audit] table alone would turn
        the audit trail on)."""
        assert {} == tomllib.loads(self.TEXT)

    def test_every_key_documented(self) -> None:
        """Uncommented, it has exactly scrun-py's tables and every key of each."""
        data = tomllib.loads(uncommented(self.TEXT))
        assert set(site_conf.SECTIONS) == set(data)
        assert {"policy": set(policy.KEYS), "trust": set(TRUST_KEYS),
                "audit": {"file", "syslog"}, "exec": {"runtime"},
                "staging": set(staging_conf.KEYS)} == \
            {k: set(v) for k, v in data.items()}

    def test_accepted_uncommented(self, tmp_path: Path) -> None:
        """Uncommented, scrun-py reads it without an error: the policy, the audit
        settings, the trust settings and the exec runtime."""
        (tmp_path / "scrun-py.toml").write_text(uncommented(self.TEXT))
        conf = tmp_path / "slurm.conf"
        site = site_conf.load(conf, system=tmp_path / "scrun-py.toml")
        loaded = policy.load_policy(site)
        assert loaded.no_new_privileges is True
        assert "/var/log/scrun-py/audit.jsonl" == audit.load_settings(conf, site).file
        assert "SLURM_JOB_ID" in trust.parse(site).container_env
        assert site_conf.exec_runtime(conf) is not None
        assert ["/home", "/scratch", "/projects"] == \
            staging_conf.settings(site)["shared_paths"]
