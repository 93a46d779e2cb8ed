"""`doctor`: check, in order, everything a site needs for scrun-py and print a table (or
JSON); non-zero if anything fatal.

Each check is a function of the run's `Context` (context.py) that returns a `Check`
(report.py), by subject: Slurm (slurm.py), what runs containers (runtime.py), the site's
files (site_files.py), the container engines (engines.py), the staging script's base
seen from a node (staging.py, last: its one step starts once the others are done).
Checks after a failed one still run when they can, so one run shows every problem; a
check that cannot run without something found missing (slurm.conf, a valid oci.conf) is
skipped, saying which.
"""

from __future__ import annotations

import json
import sys

from scrun_py.base.errors import ScrunError
from scrun_py.base.invocation import Invocation

TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
if TYPE_CHECKING:
    from scrun_py.commands.doctor.report import Check


class DoctorFailed(ScrunError):
    pass


def run_checks(inv: Invocation, timeout_s: float | None = None) -> list[Check]:
    """Every check, in the order of the table; a check that crashes is a failed line."""
    from scrun_py.commands.doctor import (
        context,
        engines,
        runtime,
        site_files,
        slurm,
        staging,
    )
    from scrun_py.commands.doctor.report import FAIL, Check

    ctx = context.start(inv, context.PROBE_TIMEOUT_S if timeout_s is None else timeout_s)
    steps = [slurm.slurm_conf_found, slurm.slurm_commands, slurm.slurm_release,
             slurm.slurmctld, slurm.slurm_backend, slurm.munge, runtime.oci_conf,
             site_files.scrun_lua, site_files.site_file, runtime.oci_runtime,
             runtime.user_namespaces, runtime.root_dir, engines.engines,
             engines.root_engines, staging.staging_base]
    checks = []
    for step in steps:
        try:
            checks.append(step(ctx))
        except Exception as exc:  # a check must never crash the report
            checks.append(Check(step.__name__, FAIL, f"check crashed: {exc!r}"))
    return checks


def run(inv: Invocation, as_json: bool) -> None:
    from scrun_py.base import logs
    from scrun_py.commands.doctor.report import as_json as checks_json
    from scrun_py.commands.doctor.report import render_table

    # quiet structlog (hook loading logs): only the table goes to stdout
    logs.configure_structlog(logs.Sinks(stderr_level=logs.LEVELS["error"],
                                        file_level=logs.LEVELS["quiet"],
                                        syslog_level=logs.LEVELS["quiet"], log_path=None,
                                        log_format="text"))
    checks = run_checks(inv)
    if as_json:
        sys.stdout.write(json.dumps(checks_json(checks), indent=2) + "\n")
    else:
        sys.stdout.write(render_table(checks) + "\n")
    failed = [c.name for c in checks if c.fatal]
    if failed:
        raise DoctorFailed("doctor: failed: " + ", ".join(failed))
