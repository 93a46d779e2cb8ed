"""Whether a site file can apply at all: every verb asks before it loads scrun-py.toml
(its audit record), so this module imports os alone."""

from __future__ import annotations

import os

from scrun_py.base import layout


def site_file_may_apply(slurm_conf: str) -> bool:
    """Whether a site file sits next to `slurm_conf` or the system's slurm.conf (the
    system's may make itself the one in use, and is the one in use on a configless
    node): only then can it ask for an audit trail."""
    return any(os.path.lexists(os.path.join(os.path.dirname(conf), layout.SITE_FILE))
               for conf in (slurm_conf, layout.DEFAULT_SLURM_CONF))
