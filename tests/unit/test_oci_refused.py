"""oci/refused.py: the settings the node's runtime cannot apply in a Slurm job."""

from __future__ import annotations

from typing import Any

import pytest

from scrun_py.oci.refused import THROTTLE_KEYS, refused_setting


class TestRefusedSetting:
    @pytest.mark.parametrize("key", THROTTLE_KEYS)
    def test_block_io_throttling(self, key: str) -> None:
        """Any throttle device list (podman's --device-read-bps …) is refused, naming
        the field."""
        raw = {"linux": {"resources": {"blockIO": {key: [
            {"major": 1, "minor": 5, "rate": 1048576}]}}}}
        assert refused_setting(raw).startswith(
            f"linux.resources.blockIO.{key}: block I/O throttling is not supported")

    @pytest.mark.parametrize("raw", [
        {}, {"linux": None}, {"linux": {"resources": {"blockIO": {"weight": 300}}}},
        {"linux": {"resources": {"blockIO": {"throttleReadBpsDevice": []}}}},
        {"linux": {"resources": {"memory": {"limit": 1 << 27}}}}, [], "x",
    ])
    def test_accepted(self, raw: Any) -> None:
        """Other resources, an empty list and odd shapes pass (the node decides)."""
        assert "" == refused_setting(raw)
