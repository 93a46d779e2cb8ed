"""A hostile image's environment through the real engines: `docker run -e`
and `podman run -e` are indistinguishable from an image's ENV, and neither may choose
Slurm's configuration or a program Slurm runs outside the container."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.e2e.conftest import BASE
from tests.e2e.test_engines import (  # noqa: F401 - fixtures
    Engine,
    _guarded,
    any_engine,
    engines_up,
)

pytestmark = [pytest.mark.e2e, pytest.mark.engines]


class TestHostileEnvironment:
    @pytest.mark.parametrize("name", ["SCRUN_PROLOG", "SLURM_PROLOG", "SCRUN_TASK_PROLOG"])
    def test_program_variables_do_not_run(self, any_engine: Engine, name: str) -> None:  # noqa: F811
        """A program named by the container's environment is not run by srun on the login
        node (as root under docker) or by slurmstepd outside the container."""
        eng = any_engine
        marker = BASE / f"ran-{uuid.uuid4().hex[:8]}"
        program = BASE / f"prog-{uuid.uuid4().hex[:8]}.sh"
        program.write_text(f"#!/bin/sh\ntouch {marker}\n")
        os.chmod(program, 0o755)
        try:
            res = eng.run("--rm", "-e", f"{name}={program}", eng.image, "true")
            assert 0 == res.returncode, res.stderr
            assert not marker.exists(), f"{name} ran {program}"
        finally:
            program.unlink(missing_ok=True)
            marker.unlink(missing_ok=True)

    def test_slurm_conf_is_not_imported(self, any_engine: Engine) -> None:  # noqa: F811
        """SLURM_CONF in the container's environment does not reach salloc: the run works
        with the site's configuration."""
        eng = any_engine
        res = eng.run("--rm", "-e", "SLURM_CONF=/nonexistent/slurm.conf", eng.image, "true")
        assert 0 == res.returncode, res.stderr
