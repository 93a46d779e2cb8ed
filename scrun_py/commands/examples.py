"""`example [NAME]`: print one of the example site files the package carries
(scrun_py/examples/), so a site installing the wheel has them to copy:

    scrun-py example oci.conf > /etc/slurm/oci.conf

Without NAME, the list: each name, where the file goes, and what it is for.  Not a runc
or crun verb: neither has one of this name, so an engine never calls it.
"""

from __future__ import annotations

import os
import sys

from scrun_py.base.errors import ScrunError, UsageError
from scrun_py.base.records import NamedTuple


class Example(NamedTuple):
    name: str  # what `example NAME` takes: the file's name where it goes
    file: str  # in scrun_py/examples/
    where: str
    what: str


EXAMPLES: tuple[Example, ...] = (
    Example("oci.conf", "oci.conf.example", "login and compute nodes, beside slurm.conf",
            "Slurm's OCI runtime settings: rootless crun (RunTimeRun must start with exec)"),
    Example("scrun.lua", "scrun.lua", "login node, beside slurm.conf; optional",
            "stage_in/stage_out hooks that run the bundle where it is (a shared directory)"),
    Example("scrun-staging.lua", "scrun-staging.lua",
            "login node, beside slurm.conf as scrun.lua",
            "hooks that stage docker's and podman's bundles to the node (rsync, flock)"),
    Example("scrun-py.toml", "scrun-py.toml", "login node, beside slurm.conf; optional",
            "scrun-py's site settings: [trust], [policy], [audit], [exec]; all commented"),
)


def examples_dir() -> str:
    """scrun_py/examples/ of this package (the wheel's package data, or the checkout)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")


def listing() -> str:
    """The names, one a line, with where each file goes and what it is for."""
    width = max(len(e.name) for e in EXAMPLES)
    lines = [f"{e.name:<{width}}  {e.what}\n{'':<{width}}  ({e.where})" for e in EXAMPLES]
    return ("\n".join(lines) + "\n\nscrun-py example NAME prints one: "
            "scrun-py example oci.conf > /etc/slurm/oci.conf\n")


def find(name: str) -> Example:
    """The example called `name` (its file name is taken too); UsageError otherwise."""
    for e in EXAMPLES:
        if name in (e.name, e.file):
            return e
    raise UsageError(f"no example named {name!r}: choose one of "
                     f"{', '.join(e.name for e in EXAMPLES)}")


def text(name: str) -> bytes:
    """The example file's bytes."""
    path = os.path.join(examples_dir(), find(name).file)
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ScrunError(f"example {name}: cannot read {path}: "
                         f"{exc.strerror} (a broken install?)") from None


def run(name: str | None) -> None:
    out = listing().encode() if name is None else text(name)
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
