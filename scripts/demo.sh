#!/bin/bash
# Set up everything on a fresh Debian 12/13 machine (packages, munge, slurmctld, slurmd,
# crun, docker and podman, an ordinary test user, scrun-py in a virtualenv) and run a
# container through scrun-py as that user on the local one-node cluster: once with
# scrun-py itself, once with rootless `podman run`.   scripts/demo.sh (as root)
#
#   scripts/demo.sh --nodes 3   the same on a 3-node cluster (scripts/cluster.sh
#                                    --nodes 3): one task on each node, each printing its
#                                    rank and node, labelled (docs/multinode.md)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
NODES=1
case "${1:-}" in
    --nodes) NODES=${2:?--nodes needs a number} ;;
    --nodes=*) NODES=${1#--nodes=} ;;
    "") ;;
    *) echo "usage: $0 [--nodes N]" >&2; exit 2 ;;
esac
"$REPO/scripts/cluster.sh" up --nodes "$NODES"
eval "$("$REPO/scripts/cluster.sh" env --nodes "$NODES" | sed 's/^/export /')"
# a job across the nodes: one task on each, every line labelled with its task's rank
SCRUN_OPTS=()
MSG='hello from a container in Slurm job $SLURM_JOB_ID on $(hostname), uid $(id -u) inside'
PODMAN_MSG='hello from podman, Slurm job $SLURM_JOB_ID'
if [ "$NODES" -gt 1 ]; then
    SCRUN_OPTS=(SCRUN_JOB_NUM_NODES="$NODES" SCRUN_LABELIO=1)
    MSG='rank $SLURM_PROCID of $SLURM_NTASKS on node $SLURMD_NODENAME (node $SLURM_NODEID of $SLURM_JOB_NODELIST), Slurm job $SLURM_JOB_ID'
    PODMAN_MSG="podman: $MSG"
fi
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
"$SCRUN_TEST_VENV/bin/python" - "$work/bundle/config.json" "$MSG" <<'PY'
import json, sys
path = sys.argv[1]
cfg = json.load(open(path))
cfg["process"]["terminal"] = False
cfg["process"]["args"] = ["sh", "-c", f'echo "{sys.argv[2]}"']
json.dump(cfg, open(path, "w"), indent=2)
PY
chown -R "$SCRUN_TEST_USER" "$work"
echo "== scrun-py run, as $SCRUN_TEST_USER =="
setpriv --reuid="$SCRUN_TEST_USER" --regid="$SCRUN_TEST_USER" --init-groups -- \
    env HOME="/home/$SCRUN_TEST_USER" USER="$SCRUN_TEST_USER" XDG_RUNTIME_DIR="/run/user/$uid" \
        SLURM_CONF="$SLURM_CONF" PATH="$SCRUN_TEST_VENV/bin:${SCRUN_TEST_SLURM_PREFIX:+$SCRUN_TEST_SLURM_PREFIX/bin:}/usr/bin:/bin" \
        ${SCRUN_OPTS[@]+"${SCRUN_OPTS[@]}"} \
    scrun-py --root "$work/root" run --bundle "$work/bundle" demo-$$
show_job() {  # the user's latest job: each container's job is named after the container
    local job
    job=$(squeue -h -u "$SCRUN_TEST_USER" --states=all -o '%i' 2>/dev/null |
          sort -n | tail -1)
    echo "== the Slurm job that ran it =="
    scontrol show job "$job" | grep -E 'JobId|JobState|UserId|NodeList|ExitCode|NumNodes' |
        grep -v ReqNodeList | sed 's/^ */  /'
}
show_job
if [ "${WITH_ENGINES:-1}" = 1 ]; then
    eval "$("$REPO/scripts/engines.sh" env | sed 's/^/export /')"
    echo "== podman run (rootless, as $SCRUN_TEST_USER) with scrun-py as its runtime =="
    (cd / && setpriv --reuid="$SCRUN_TEST_USER" --regid="$SCRUN_TEST_USER" --init-groups -- \
        env -i HOME="/home/$SCRUN_TEST_USER" USER="$SCRUN_TEST_USER" LOGNAME="$SCRUN_TEST_USER" \
            PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="/run/user/$uid" \
            CONTAINERS_CONF="$CONTAINERS_CONF" \
        podman run --rm ${SCRUN_OPTS[@]+$(printf -- '-e %s ' "${SCRUN_OPTS[@]}")} \
            "localhost/$SCRUN_TEST_IMAGE" \
            sh -c "echo \"$PODMAN_MSG\"")
    show_job
fi
echo "== the cluster and the engines keep running: scripts/cluster.sh down --all stops them =="
