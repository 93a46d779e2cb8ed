#!/bin/bash
# Set up everything on a fresh Debian 12/13 machine (packages, munge, slurmctld, slurmd,
# crun, docker and podman, an ordinary test user, scrun-py in a virtualenv) and run a
# container through scrun-py as that user on the local one-node cluster: once with
# scrun-py itself, once with rootless `podman run`.   sudo scripts/demo.sh
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
"$REPO/scripts/cluster.sh" up
eval "$("$REPO/scripts/cluster.sh" env | sed 's/^/export /')"
uid=$(id -u "$SCRUN_TEST_USER")
work=$(mktemp -d /tmp/scrun-py-demo.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
# a busybox bundle for a rootless crun (what oci.conf runs on the node)
mkdir -p "$work/bundle/rootfs/bin" "$work/bundle/rootfs/usr/bin" "$work/bundle/rootfs/proc" \
         "$work/bundle/rootfs/dev" "$work/bundle/rootfs/sys" "$work/bundle/rootfs/tmp"
cp /bin/busybox "$work/bundle/rootfs/bin/"
for a in sh echo cat hostname id uname; do
    ln -sf /bin/busybox "$work/bundle/rootfs/bin/$a"; ln -sf /bin/busybox "$work/bundle/rootfs/usr/bin/$a"
done
(cd "$work/bundle" && crun spec --rootless)
"$SCRUN_TEST_VENV/bin/python" - "$work/bundle/config.json" <<'PY'
import json, sys
path = sys.argv[1]
cfg = json.load(open(path))
cfg["process"]["terminal"] = False
cfg["process"]["args"] = ["sh", "-c",
    'echo "hello from a container in Slurm job $SLURM_JOB_ID on $(hostname), uid $(id -u) inside"']
json.dump(cfg, open(path, "w"), indent=2)
PY
chown -R "$SCRUN_TEST_USER" "$work"
echo "== scrun-py run, as $SCRUN_TEST_USER =="
setpriv --reuid="$SCRUN_TEST_USER" --regid="$SCRUN_TEST_USER" --init-groups -- \
    env HOME="/home/$SCRUN_TEST_USER" USER="$SCRUN_TEST_USER" XDG_RUNTIME_DIR="/run/user/$uid" \
        SLURM_CONF="$SLURM_CONF" PATH="$SCRUN_TEST_VENV/bin:/usr/bin:/bin" \
    scrun-py --root "$work/root" run --bundle "$work/bundle" demo-$$
show_job() {
    local job
    job=$(squeue -h -u "$SCRUN_TEST_USER" --states=all -o '%i %j' 2>/dev/null |
          awk '$2=="scrun"{print $1}' | sort -n | tail -1)
    echo "== the Slurm job that ran it =="
    scontrol show job "$job" | grep -E 'JobId|JobState|UserId|NodeList|ExitCode' | sed 's/^ */  /'
}
show_job
if [ "${WITH_ENGINES:-1}" = 1 ]; then
    eval "$("$REPO/scripts/engines.sh" env | sed 's/^/export /')"
    echo "== podman run (rootless, as $SCRUN_TEST_USER) with scrun-py as its runtime =="
    (cd / && setpriv --reuid="$SCRUN_TEST_USER" --regid="$SCRUN_TEST_USER" --init-groups -- \
        env -i HOME="/home/$SCRUN_TEST_USER" USER="$SCRUN_TEST_USER" LOGNAME="$SCRUN_TEST_USER" \
            PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="/run/user/$uid" \
            CONTAINERS_CONF="$CONTAINERS_CONF" \
        podman run --rm "localhost/$SCRUN_TEST_IMAGE" \
            sh -c 'echo "hello from podman, Slurm job $SLURM_JOB_ID"')
    show_job
fi
