"""The OCI state document printed by `state` (handle.state_document, render)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
from typing import Any

import pytest

from scrun_py.container.record import ContainerRecord, render, state_document
from scrun_py.container.status import Status

KEY_ORDER = ["ociVersion", "id", "status", "pid", "bundle", "annotations", "rootfs", "created",
             "owner"]


def _doc(status: Status = Status.RUNNING, **changes: Any) -> dict[str, Any]:
    """The document of a record whose status is `status` (the record's own is `running`)."""
    fields: dict[str, Any] = {
        "oci_version": "1.0.2", "id": "c1", "status": "running", "anchor_pid": 4242,
        "bundle": "/b/c1", "rootfs": "/b/c1/rootfs", "created": "2024-01-02T03:04:05.000000Z",
        "owner": "tuser", "annotations": {"org.example/a": "1"},
    }
    fields.update(changes)
    return state_document(ContainerRecord(**fields), status)


class TestStateDocument:
    def test_key_order(self) -> None:
        """Keys come in Slurm's order, then runc's extras."""
        assert KEY_ORDER == list(_doc())

    def test_values(self) -> None:
        """Each argument lands under its OCI key; status is the lowercase word."""
        assert {"ociVersion": "1.0.2", "id": "c1", "status": "running", "pid": 4242,
                "bundle": "/b/c1", "annotations": {"org.example/a": "1"},
                "rootfs": "/b/c1/rootfs", "created": "2024-01-02T03:04:05.000000Z",
                "owner": "tuser"} == _doc()

    @pytest.mark.parametrize("status", [Status.CREATING, Status.CREATED, Status.RUNNING])
    def test_pid_while_alive(self, status: Status) -> None:
        """Before it stops, the pid is the anchor's."""
        assert 4242 == _doc(status)["pid"]

    def test_pid_zero_when_stopped(self) -> None:
        """A stopped container reports pid 0 (there is no process to signal)."""
        assert (0, "stopped") == (_doc(Status.STOPPED)["pid"], _doc(Status.STOPPED)["status"])

    def test_empty_annotations_kept(self) -> None:
        """Empty annotations are still present as an object."""
        assert {} == _doc(annotations={})["annotations"]


class TestRender:
    def test_exact_line(self) -> None:
        """The document renders as this exact compact line."""
        expected = ('{"ociVersion":"1.0.2","id":"c1","status":"running","pid":4242,'
                    '"bundle":"/b/c1","annotations":{"org.example/a":"1"},'
                    '"rootfs":"/b/c1/rootfs","created":"2024-01-02T03:04:05.000000Z",'
                    '"owner":"tuser"}')
        assert expected == render(_doc())

    def test_one_line(self) -> None:
        """Values with newlines are escaped, so the output stays on one line."""
        line = render(_doc(annotations={"note": "a\nb"}, bundle="/b/with space"))
        assert "\n" not in line
        assert "a\nb" == json.loads(line)["annotations"]["note"]

    def test_round_trip_keeps_order(self) -> None:
        """Parsing the line back gives the same keys in the same order."""
        assert KEY_ORDER == list(json.loads(render(_doc(Status.STOPPED))))
