"""What each Slurm release gives a container job, as scrun-py uses it.

One table, read by `doctor` (which reports the release and what applies) and by the
end-to-end tests (which check each entry on the release under test).  Releases tested:
22.05 (Debian 12's packages), 24.11 (Debian 13's source package), 25.11 and 26.05
(SchedMD's release tarballs).
"""

from __future__ import annotations

from scrun_py.base.records import NamedTuple


class Feature(NamedTuple):
    name: str
    since: tuple[int, int]
    what: str


FEATURES: tuple[Feature, ...] = (
    Feature("--container-id", (23, 2),
            "srun --container-id names the step's container; SLURM_CONTAINER_ID is set in it"),
    Feature("task environment", (23, 2),
            "the container gets its task's SLURM_PROCID, SLURM_NODEID and SLURM_LOCALID "
            "(older releases give it the step's variables only)"),
    Feature("EnvExclude", (23, 2),
            "oci.conf EnvExclude and RunTimeEnvExclude filter the container's and the "
            "runtime's environment"),
    Feature("%U and %p", (23, 2), "oci.conf patterns know the user's numeric id and the pid"),
    Feature("scrun", (23, 2), "Slurm ships its own scrun"),
    Feature("%Z", (26, 5), "oci.conf patterns know the job's working directory"),
    Feature("root.path", (23, 2),
            "slurmstepd runs the container from config.json's root.path (22.05 runs "
            "BUNDLE/rootfs whatever root.path says: scrun-py refuses to start a bundle "
            "whose root.path is another directory)"),
)


def release_name(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]:02d}"


def offered(version: tuple[int, int]) -> tuple[list[Feature], list[Feature]]:
    """(features this release has, features it lacks)."""
    has = [f for f in FEATURES if version >= f.since]
    return has, [f for f in FEATURES if version < f.since]


def has(version: tuple[int, int], name: str) -> bool:
    return any(f.name == name and version >= f.since for f in FEATURES)
