"""The names scrun-py writes: its files', and the statuses in a container's record.
The one home of each.  Pure: no imports (`state` reads these without the Status enum,
which container/status.py builds from them).
"""

#: what a container's directory under --root holds: its record, the anchor's control
#: socket, and the script that ends the allocation when the anchor is gone
STATE_FILE = "state.json"
SOCKET_NAME = "anchor.sock"
ABANDON_FILE = "on-abandon.sh"
#: the stage_out the anchor owes once stage_in ran (hooks/owed.py): delete runs it if the
#: anchor died first
STAGE_OUT_FILE = "stage-out.json"
#: the site file, next to slurm.conf (base/conf_lookup.py says which); the system's
#: slurm.conf, scrun-py's compiled-in default, and the configless copy Slurm's clients
#: fall back to (slurmd links /run/slurm/conf to its conf-cache, sackd writes there): all
#: read at call time, as the tests that stand a directory in for /etc/slurm set them
SITE_FILE = "scrun-py.toml"
#: the keys of the site file's [trust] table (site/site_conf.py refuses others from the
#: system's file, site/trust.py reads them)
TRUST_KEYS = ("site_files", "lua_override", "container_env")
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
CONFIGLESS_SLURM_CONF = "/run/slurm/conf/slurm.conf"
#: a container's status, as `state` prints it
CREATING = "creating"
CREATED = "created"
RUNNING = "running"
STOPPED = "stopped"
STATUSES = (CREATING, CREATED, RUNNING, STOPPED)
