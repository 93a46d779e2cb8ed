"""`doctor`: check the site setup and print a table (or JSON); non-zero if anything fatal."""

from __future__ import annotations

import json
import sys

from scrun_py.base.errors import ScrunError
from scrun_py.base.invocation import Invocation


class DoctorFailed(ScrunError):
    pass


def run(inv: Invocation, as_json: bool) -> None:
    from scrun_py.base import logs
    from scrun_py.site import doctor_checks

    # quiet structlog (hook loading logs): only the table goes to stdout
    logs.configure_structlog(logs.Sinks(stderr_level=logs.LEVELS["error"],
                                        file_level=logs.LEVELS["quiet"],
                                        syslog_level=logs.LEVELS["quiet"], log_path=None,
                                        log_format="text"))
    checks = doctor_checks.Doctor(inv).run()
    if as_json:
        sys.stdout.write(json.dumps(doctor_checks.as_json(checks), indent=2) + "\n")
    else:
        sys.stdout.write(doctor_checks.render_table(checks) + "\n")
    failed = [c.name for c in checks if c.fatal]
    if failed:
        raise DoctorFailed("doctor: failed: " + ", ".join(failed))
