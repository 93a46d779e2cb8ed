"""Docs tests: docs/oci.conf.md and oci.conf.example cover every OciConf key and token."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

from pathlib import Path

import pytest

from scrun_py.site.oci_conf import OciConf, parse_oci_conf
from scrun_py.site.patterns import KNOWN_TOKENS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "oci.conf.md"
EXAMPLE = ROOT / "oci.conf.example"
ALIASES = sorted(f.alias or name for name, f in OciConf.model_fields.items())


class TestDocsOciConf:
    @pytest.mark.parametrize("path", [DOC, EXAMPLE], ids=["docs", "example"])
    def test_every_key_documented(self, path: Path) -> None:
        """Every OciConf alias appears in the reference page and in the example."""
        text = path.read_text(encoding="utf-8")
        assert [] == [alias for alias in ALIASES if alias not in text]

    def test_every_key_in_doc_table(self) -> None:
        """Every OciConf alias has its own row in the docs key table."""
        text = DOC.read_text(encoding="utf-8")
        assert [] == [alias for alias in ALIASES if f"| `{alias}` |" not in text]

    def test_every_token_in_doc_table(self) -> None:
        """Every pattern token has its own row in the docs token table."""
        text = DOC.read_text(encoding="utf-8")
        assert [] == [tok for tok in sorted(KNOWN_TOKENS) if f"| `{tok}` |" not in text]

    def test_example_parses(self) -> None:
        """oci.conf.example is a valid run-mode config."""
        conf = parse_oci_conf(EXAMPLE.read_text(encoding="utf-8"), source=EXAMPLE.name)
        assert "run" == conf.mode

    def test_example_runs_on_22_05(self) -> None:
        """The active example config has no problems on the Slurm 22.05 test cluster."""
        conf = parse_oci_conf(EXAMPLE.read_text(encoding="utf-8"), source=EXAMPLE.name)
        assert [] == conf.supported_by((22, 5))

    def test_example_active_block(self) -> None:
        """The active config is exactly the test cluster's rootless crun block."""
        conf = parse_oci_conf(EXAMPLE.read_text(encoding="utf-8"), source=EXAMPLE.name)
        state = "crun --rootless=true --root=/tmp/ocistate-%u"
        name = "%n.%u.%j.%s.%t"
        expected = {
            "RunTimeQuery": f"{state} state {name}",
            "RunTimeKill": f"{state} kill {name}",
            "RunTimeDelete": f"{state} delete --force {name}",
            "RunTimeRun": f"exec {state} run --bundle %b {name}",
        }
        assert expected == conf.model_dump(by_alias=True, exclude_unset=True)
