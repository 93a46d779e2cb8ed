"""What a container asks of its engine becomes its job's request (oci/resources.py), read
from the config.json files docker and podman wrote for each flag (tests/engine_configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrun_py.oci.resources import (
    Requested,
    apply_engine_request,
    cpuset_count,
    engine_request,
    override_message,
)

CONFIGS = Path(__file__).parent.parent / "engine_configs"
MIB = 1 << 20

#: each captured config.json and the SCRUN_* request it makes
GOLDEN: dict[str, dict[str, str]] = {
    "dk-cpus": {"SCRUN_CPUS_PER_TASK": "2"},  # --cpus 1.5, rounded up
    "pm-cpus": {"SCRUN_CPUS_PER_TASK": "3"},  # --cpus 2.5
    "dk-cpuset": {"SCRUN_CPUS_PER_TASK": "2"},  # 0-1: a count, not the login node's ids
    "pm-cpuset": {"SCRUN_CPUS_PER_TASK": "2"},
    "dk-memory": {"SCRUN_MEM_PER_NODE": "512M"},
    "pm-memory": {"SCRUN_MEM_PER_NODE": "512M"},
    "dk-memswap": {"SCRUN_MEM_PER_NODE": "512M"},  # swap is not read
    "pm-memswap": {"SCRUN_MEM_PER_NODE": "512M"},
    "dk-mem16g": {"SCRUN_MEM_PER_NODE": "16384M"},
    "dk-mem1t": {"SCRUN_MEM_PER_NODE": "1048576M"},
    "pm-x": {"SCRUN_MEM_PER_NODE": "1048576M"},
    "dk-memres": {"SCRUN_MEM_PER_NODE": "256M"},  # no limit: the reservation
    "pm-memres": {"SCRUN_MEM_PER_NODE": "256M"},
}
#: shares, pids (podman always writes 2048), shm, rlimits, devices ask nothing of Slurm
NOTHING = ["dk-plain", "dk-plain2", "pm-plain", "dk-cpushares", "pm-cpushares", "dk-pids",
           "pm-pids", "dk-shm", "pm-shm", "pm-shm2", "dk-ulimit", "pm-ulimit", "dk-device",
           "pm-device", "dk-devrule", "pm-devrule", "pm-env", "pm-annot"]


def _request(name: str) -> dict[str, str]:
    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    return {r.var: r.value for r in engine_request(raw)}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden(name: str) -> None:
    assert GOLDEN[name] == _request(name)


@pytest.mark.parametrize("name", NOTHING)
def test_flags_that_ask_nothing_of_slurm(name: str) -> None:
    assert {} == _request(name)


def test_every_capture_is_checked() -> None:
    names = {p.stem for p in CONFIGS.glob("*.json")}
    gpu = {n for n in names if "gpu" in n or "cdi" in n or n == "pm-proxy"}
    assert names - gpu == set(GOLDEN) | set(NOTHING)


def test_the_source_names_the_flag() -> None:
    raw = json.loads((CONFIGS / "dk-cpus.json").read_text())
    assert [Requested("SCRUN_CPUS_PER_TASK", "2",
                      "--cpus (cpu.quota 150000 / cpu.period 100000)")] == engine_request(raw)


@pytest.mark.parametrize("resources", [
    {"cpu": {"quota": 0, "period": 100000}}, {"cpu": {"quota": -1, "period": 100000}},
    {"cpu": {"quota": 100000, "period": 0}}, {"cpu": {"quota": True, "period": 1}},
    {"cpu": {"quota": "2", "period": 1}}, {"cpu": {"cpus": ""}}, {"cpu": {"cpus": "a-b"}},
    {"cpu": {"cpus": "3-1"}}, {"cpu": "x"}, {"memory": {"limit": -1}},
    {"memory": {"limit": 1.5}}, {"memory": {"reservation": 0}}, {"memory": []},
])
def test_unusable_values_ask_nothing(resources: dict[str, object]) -> None:
    assert [] == engine_request({"linux": {"resources": resources}})


@pytest.mark.parametrize("raw", [{}, {"linux": None}, {"linux": {"resources": []}}])
def test_no_resources(raw: dict[str, object]) -> None:
    assert [] == engine_request(raw)


def test_quota_wins_over_cpuset_and_limit_over_reservation() -> None:
    raw = {"linux": {"resources": {
        "cpu": {"quota": 50000, "period": 100000, "cpus": "0-3"},
        "memory": {"limit": MIB + 1, "reservation": 5 * MIB}}}}
    assert {"SCRUN_CPUS_PER_TASK": "1", "SCRUN_MEM_PER_NODE": "2M"} == {
        r.var: r.value for r in engine_request(raw)}



@pytest.mark.parametrize(("cpus", "count"), [
    ("0", 1), ("0-3", 4), ("0-3,8", 5), ("0,0,1", 2), ("1-2,2-3", 3), (" 4 , 6-7", 3),
    ("", 0), ("x", 0), ("1-", 0), ("-1", 0), ("2-1", 0)])
def test_cpuset_count(cpus: str, count: int) -> None:
    assert count == cpuset_count(cpus)


class TestPrecedence:
    REQ = (Requested("SCRUN_CPUS_PER_TASK", "2", "--cpus"),
           Requested("SCRUN_MEM_PER_NODE", "300M", "--memory"))

    def test_applied_without_explicit_variables(self) -> None:
        env, overrides = apply_engine_request({"HOME": "/h"}, list(self.REQ))
        assert {"HOME": "/h", "SCRUN_CPUS_PER_TASK": "2", "SCRUN_MEM_PER_NODE": "300M"} == env
        assert [] == overrides

    @pytest.mark.parametrize(("explicit", "value", "wins_over"), [
        ("SCRUN_CPUS_PER_TASK", "4", "SCRUN_CPUS_PER_TASK"),
        ("SCRUN_CPUS_PER_GPU", "4", "SCRUN_CPUS_PER_TASK"),
        ("SCRUN_MEM_PER_NODE", "1G", "SCRUN_MEM_PER_NODE"),
        ("SCRUN_MEM_PER_CPU", "100M", "SCRUN_MEM_PER_NODE"),
        ("SCRUN_MEM_PER_GPU", "1G", "SCRUN_MEM_PER_NODE")])
    def test_an_explicit_variable_wins(self, explicit: str, value: str,
                                       wins_over: str) -> None:
        env, overrides = apply_engine_request({explicit: value}, list(self.REQ))
        assert value == env[explicit]
        assert wins_over not in env or wins_over == explicit
        assert [(wins_over, explicit, value)] == [
            (o.requested.var, o.explicit, o.value) for o in overrides]
        other = {r.var for r in self.REQ} - {wins_over}
        assert other <= set(env)  # the other kind still applies

    def test_an_empty_variable_is_not_explicit(self) -> None:
        env, overrides = apply_engine_request({"SCRUN_CPUS_PER_TASK": ""}, list(self.REQ))
        assert "2" == env["SCRUN_CPUS_PER_TASK"]
        assert [] == overrides

    def test_the_log_line(self) -> None:
        _, overrides = apply_engine_request({"SCRUN_CPUS_PER_TASK": "4"}, list(self.REQ))
        assert ("SCRUN_CPUS_PER_TASK=4 wins over the engine's --cpus, which would ask for "
                "SCRUN_CPUS_PER_TASK=2") == override_message(overrides[0])
