#!/bin/bash
# Bring up (or tear down) a real one-node Slurm cluster for scrun-py on this machine.
#
#   scripts/cluster.sh up   [--slurm R]   install packages, start munge + slurmctld + slurmd,
#                                         make the test user and a world-readable virtualenv
#                                         with scrun-py in it, start the engines
#   scripts/cluster.sh down [--slurm R] [--nodes N]
#                                         stop what "up" started for that cluster: its
#                                         engines (dockerd, containerd), its jobs (cancelled),
#                                         slurmd(s), the nodes' munged's and slurmctld
#   scripts/cluster.sh down --all         the same for every cluster of every release, then
#                                         the rootless podman's pause process of the test
#                                         user and the machine's munged
#   scripts/cluster.sh env  [--slurm R]   print the environment the tests use
#   scripts/cluster.sh releases           print the releases of scripts/releases.conf, the
#                                         machine's packaged one first
#   scripts/cluster.sh releases --testable
#                                         only those whose source can be had here (a
#                                         tarball release needs its file in
#                                         $SCRUN_SLURM_MIRROR); one line on stderr for
#                                         each of the others
#   scripts/cluster.sh reconfigure [--slurm R] [--nodes N]
#                                         scontrol reconfigure; on the site cluster the
#                                         login node's sackd is started again, so that it
#                                         fetches the controller's files anew
#   scripts/cluster.sh crash NODE --nodes N [--slurm R]
#                                         SIGKILL every process of node NODE of a multi-node
#                                         cluster (its slurmd, slurmstepds, containers, munged):
#                                         a node crash; "up" brings the node back
#
# "up" also installs the release's pyslurm into the virtualenv where the release has one
# (scripts/pyslurm.sh: 25.11), so that release's suite runs on the pyslurm backend.
#
# --nodes N (N > 1) makes a separate N-node cluster of release R, beside the one-node one:
# nodes n1..nN on this machine, each slurmd in its own UTS namespace (its hostname is the
# node name) listening on its own port of 127.0.0.1, with its own spool dir, pid file and
# log (%n).  Each node also gets its own munged (same key), bind-mounted on /run/munge in
# the slurmd's private mount namespace: with one munged shared by every node, the nodes'
# decodes of one job credential are replays to munge, and task launch fails on all nodes
# but one (24.11: "failed decode"; 22.05 built on Debian 13: "Credential replayed").  The
# multi-node cluster has its own state dir ($STATE-Nn), ports (2000 above the one-node
# cluster's slurmctld port, then one per node), ClusterName and job id range, and
# SlurmdTimeout=10, so a crashed node ends its jobs within a minute.
#
# On 23.11 and later the multi-node cluster is the site topology (docs/site.md): this
# machine is a configless login node (sackd keeps slurm.conf, oci.conf and scrun.lua in
# /run/slurm/conf; the one-node cluster's links at Slurm's compiled-in default are removed
# while it is up, "down" puts them back), each node's slurmd is configless and has private
# tmpfs on /tmp, /var/tmp, /dev/shm and /run and the engines' storage hidden under empty
# mounts; /home and $SCRATCH (/shared/scratch, mode 1777) are shared.  "env" prints no
# SLURM_CONF for it.  On 22.05 (no sackd) the nodes share this machine's filesystem.  22.05's oci.conf there puts scrun_py.oci.taskenv in front of the
# runtime (slurmstepd 22.05 gives a container its step's environment, not its task's).
#
# R is a Slurm release of scripts/releases.conf (default: the machine's packaged Slurm,
# 22.05 on Debian 12, 24.11 on Debian 13).  Any other release is built once from Debian's
# source package into /opt/slurm/R (scripts/slurm-build.sh) and runs as its own cluster
# beside the packaged one: its own ports, state dir, job id range and dockerd.  Slurm's
# own scrun of that build reads the same slurm.conf (linked into /opt/slurm/R/etc).
#
# Must run as root on Debian 12 or 13. Idempotent.
set -Eeuo pipefail
# a command that fails unhandled says which, here and in any function (errexit alone is silent)
trap 'log "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

# The descriptors the caller left open (the lock of `flock FILE scripts/cluster.sh up`)
# are closed: every daemon started here would inherit them and hold that lock as long as
# it lives
for _fd in /proc/$$/fd/*; do
    _fd=${_fd##*/}
    case "$_fd" in 0|1|2|255) ;; *) eval "exec $_fd>&-" 2>/dev/null || true ;; esac
done
unset _fd
REPO=$(cd "$(dirname "$0")/.." && pwd)
CMD=${1:-up}; shift || true
RELEASE=${SCRUN_TEST_SLURM:-}
NODES=1
ALL=0
NODE_ARG=""
if [ "$CMD" = crash ]; then NODE_ARG=${1:?usage: $0 crash NODE --nodes N [--slurm R]}; shift; fi
while [ $# -gt 0 ]; do
    case "$1" in
        --slurm) RELEASE=${2:?--slurm needs a release}; shift 2 ;;
        --slurm=*) RELEASE=${1#--slurm=}; shift ;;
        --nodes) NODES=${2:?--nodes needs a number}; shift 2 ;;
        --nodes=*) NODES=${1#--nodes=}; shift ;;
        --testable) [ "$CMD" = releases ] || { echo "cluster.sh: --testable is for releases" >&2; exit 2; }; ALL=1; shift ;;
        --all) [ "$CMD" = down ] || { echo "cluster.sh: --all is for down" >&2; exit 2; }; ALL=1; shift ;;
        *) echo "usage: $0 up|down [--all]|env|releases|reconfigure|crash NODE [--slurm RELEASE] [--nodes N]" >&2; exit 2 ;;
    esac
done
case "$NODES" in ''|*[!0-9]*|0) echo "cluster.sh: --nodes needs a positive number" >&2; exit 2 ;; esac
TEST_USER=${SCRUN_TEST_USER:-scruntest}
TEST_USER2=${SCRUN_TEST_USER2:-scruntest2}
VENV=${SCRUN_TEST_VENV:-/opt/scrun-py/venv}
WITH_ENGINES=${WITH_ENGINES:-1}
STATE_BASE=${SCRUN_TEST_STATE_BASE:-/var/lib/scrun-py-test}
# the scratch filesystem of the multi-node clusters, shared by the login node and the nodes
SCRATCH=${SCRUN_TEST_SCRATCH:-/shared/scratch}
# the test users' rootless podman storage: the login node's local disk (scripts/engines.sh)
ROOTLESS_STORAGE=/var/lib/scrun-py-test-rootless

log() { printf '[cluster] %s\n' "$*" >&2; }

packaged_release() {
    # the Slurm release Debian packages for this machine
    local v
    v=$(dpkg-query -W -f='${Version}' slurmd 2>/dev/null || true)
    [ -n "$v" ] || v=$(apt-cache policy slurmd 2>/dev/null | awk '/Candidate:/ {print $2}')
    case "$v" in
        [0-9]*) echo "$v" | cut -d. -f1,2 ;;
        *) case "$(cut -d. -f1 /etc/debian_version)" in 12) echo 22.05 ;; *) echo 24.11 ;; esac ;;
    esac
}

releases() {  # every active release of releases.conf, the packaged one first
    local p; p=$(packaged_release)
    echo "$p"
    awk '!/^[[:space:]]*#/ && NF {print $1}' "$REPO/scripts/releases.conf" | grep -vxF "$p" || true
}

resolve_release() {
    PACKAGED=$(packaged_release)
    RELEASE=${RELEASE:-$PACKAGED}
    PREFIX=""
    CTLD_PORT=${SCRUN_TEST_PORT:-6817}  # the packaged release's cluster: 6817 and 6818
    FIRST_JOB_ID=""
    STATE=$STATE_BASE
    CLUSTER_NAME=scrunpy
    if [ "$RELEASE" != "$PACKAGED" ]; then
        local idx
        idx=$(awk '!/^[[:space:]]*#/ && NF {print $1}' "$REPO/scripts/releases.conf" |
              grep -nxF "$RELEASE" | cut -d: -f1 || true)
        [ -n "$idx" ] || { echo "cluster.sh: Slurm $RELEASE is not in scripts/releases.conf" >&2; exit 2; }
        PREFIX=$("$REPO/scripts/slurm-build.sh" --prefix "$RELEASE")
        STATE=$STATE_BASE-$RELEASE
        CTLD_PORT=$((7717 + 100 * idx))
        # job ids of each cluster in their own range: the OCI runtime's state dir is shared
        # and names containers after the job id
        FIRST_JOB_ID=$((idx * 1000000))
        CLUSTER_NAME=scrunpy${RELEASE//./}
        PATH=$PREFIX/bin:$PREFIX/sbin:$PATH
        export PATH
    fi
    if [ "$NODES" -gt 1 ]; then
        # a multi-node cluster of the same release: its own state dir, ports (2000 above
        # the one-node cluster's, then one per node: the packaged release's 8817.., the
        # others' 9817.. stay clear of the one-node clusters' 7817..8717), name and job id
        # range (the 2nd half
        # of the release's million; 0 for a packaged release releases.conf does not list)
        local line
        line=$(awk '!/^[[:space:]]*#/ && NF {print $1}' "$REPO/scripts/releases.conf" |
               grep -nxF "$RELEASE" | cut -d: -f1 || true)
        line=${line:-0}
        STATE=$STATE-${NODES}n
        CTLD_PORT=$((CTLD_PORT + 2000))
        FIRST_JOB_ID=$((line * 1000000 + 500000))
        CLUSTER_NAME=${CLUSTER_NAME}n$NODES
    fi
    # the multi-node cluster of a release with sackd (23.11+) is the site topology
    SITE=0
    SACKD=""
    if [ "$NODES" -gt 1 ]; then
        case "$RELEASE" in
            2[0-2].*|23.0[0-9]) ;;
            *) SITE=1; SACKD=${PREFIX:+$PREFIX/sbin/}sackd ;;
        esac
    fi
    export SCRUN_TEST_STATE=$STATE
}

install_packages() {
    # gcc + libslurm-dev (slurm/spank.h): tests/e2e/test_spank.py compiles SPANK plugins
    local pkgs=(munge slurmctld slurmd slurm-client crun runc busybox-static uidmap rsync rsyslog
                python3-venv procps util-linux gcc libslurm-dev)
    [ "$WITH_ENGINES" = 1 ] && pkgs+=(podman docker.io)
    "$REPO/scripts/apt-install.sh" cluster "${pkgs[@]}"
    if [ -n "$PREFIX" ]; then "$REPO/scripts/slurm-build.sh" "$RELEASE"; fi
}

fix_host() {
    local h; h=$(hostname -s)
    getent hosts "$h" >/dev/null || echo "127.0.0.1 $h" >> /etc/hosts
    # crun refuses cgroup v1 "hybrid" hosts while cgroup2 owns a controller: move hugetlb off it.
    if [ -f /sys/fs/cgroup/unified/cgroup.controllers ] &&
       [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers)" ]; then
        mkdir -p /sys/fs/cgroup/hugetlb
        mountpoint -q /sys/fs/cgroup/hugetlb || mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb
    fi
}

slurm_minor() { slurmd -V | awk '{print $2}' | cut -d. -f1,2; }

write_conf() {
    local h cpus mem ver
    h=$(hostname -s); cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) * 9 / 10 / 1024 ))
    ver=$(slurm_minor)
    mkdir -p "$STATE/ctld" "$STATE/d"
    [ "$NODES" = 1 ] || for i in $(seq 1 "$NODES"); do mkdir -p "$STATE/d-n$i"; done
    chown slurm "$STATE/ctld"
    chmod 755 "$STATE"
    # a multi-node cluster: one spool dir, pid file and log per node (%n)
    local node_suffix=""
    [ "$NODES" -gt 1 ] && node_suffix=-%n
    # the site cluster: every node has its own Port=, so SlurmdPort is free for what
    # listens on it by default, the login node's sackd (slurmctld's reconfigure pushes)
    local slurmd_port=$((CTLD_PORT + 1))
    [ "$SITE" = 1 ] && slurmd_port=$((CTLD_PORT + 90))
    {
        cat <<CONF
ClusterName=$CLUSTER_NAME
SlurmctldHost=$h(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$slurmd_port
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d$node_suffix
SlurmctldPidFile=$STATE/ctld/slurmctld.pid
SlurmdPidFile=$STATE/slurmd$node_suffix.pid
SlurmctldLogFile=$STATE/ctld/slurmctld.log
SlurmdLogFile=$STATE/slurmd$node_suffix.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/ctld/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
InactiveLimit=0
MinJobAge=300
KillWait=2
Waittime=0
Licenses=scrunlic:1
PlugStackConfig=$STATE/plugstack.conf
CONF
        [ -n "$FIRST_JOB_ID" ] && echo "FirstJobId=$FIRST_JOB_ID"
        # the site cluster: nodes and the login node's sackd fetch slurm.conf, oci.conf,
        # scrun.lua, cgroup.conf from slurmctld
        [ "$SITE" = 1 ] && echo "SlurmctldParameters=enable_configless"
        case "$ver" in
            22.05) printf 'SchedulerType=sched/backfill\nSwitchType=switch/none\nSlurmctldTimeout=30\n'
                   [ "$NODES" -gt 1 ] || echo "SlurmdTimeout=30" ;;
        esac
        if [ "$NODES" -gt 1 ]; then
            # a crashed node is declared down after 10 s without an answer, so its jobs
            # end within a minute (the default, 300 s, leaves them hanging for minutes);
            # every slurmd answers the controller itself (no forwarding tree)
            printf 'SlurmdTimeout=10\nTreeWidth=65533\n'
            local i
            for i in $(seq 1 "$NODES"); do
                echo "NodeName=n$i NodeAddr=127.0.0.1 Port=$((CTLD_PORT + i)) CPUs=$cpus RealMemory=$((mem / NODES)) State=UNKNOWN"
            done
        else
            echo "NodeName=$h NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
        fi
        # oversubscribed so the load tests (50 containers) and benchmarks (200 running at
        # once: bench/crowd.py) fit on a 2-CPU machine: CPUs x 128 job slots
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:128"
        echo "PartitionName=other Nodes=ALL Default=NO MaxTime=60 State=UP OverSubscribe=FORCE:32"
    } > "$STATE/slurm.conf.new"
    if [ -f "$STATE/slurm.conf" ] && ! cmp -s "$STATE/slurm.conf.new" "$STATE/slurm.conf"; then
        CONF_CHANGED=1
        # a daemon cannot move to another port on reconfigure: it is restarted
        if [ "$(grep -E '^(SlurmctldPort|SlurmdPort|NodeName)=' "$STATE/slurm.conf")" != \
             "$(grep -E '^(SlurmctldPort|SlurmdPort|NodeName)=' "$STATE/slurm.conf.new")" ]; then
            PORTS_CHANGED=1
        fi
    fi
    mv "$STATE/slurm.conf.new" "$STATE/slurm.conf"
    case "$ver" in
        22.05) ;;
        *) echo "CgroupPlugin=disabled" > "$STATE/cgroup.conf" ;;
    esac
    write_plugstack
    if [ -n "$PREFIX" ] && [ "$NODES" = 1 ]; then
        # Slurm's own scrun (and any command that is not given SLURM_CONF) reads its
        # compiled-in sysconfdir
        mkdir -p "$PREFIX/etc"
        local f
        for f in slurm.conf oci.conf cgroup.conf; do ln -sfn "$STATE/$f" "$PREFIX/etc/$f"; done
    elif [ -z "$PREFIX" ] && [ "$NODES" = 1 ] && [ -x /usr/bin/scrun ]; then
        # the same for a packaged release with Slurm's own scrun (23.02 and later): its
        # srun runs with the job's environment, without SLURM_CONF, and reads /etc/slurm.
        # Only where the machine has no slurm.conf of its own there (or one of ours).
        local f t
        mkdir -p /etc/slurm
        for f in slurm.conf oci.conf cgroup.conf; do
            t=$(readlink "/etc/slurm/$f" || true)
            if [ ! -e "/etc/slurm/$f" ] && [ ! -L "/etc/slurm/$f" ] || [ "${t#"$STATE_BASE"}" != "$t" ]; then
                ln -sfn "$STATE/$f" "/etc/slurm/$f"
            fi
        done
    fi
    # the active block of oci.conf.example is the cluster's oci.conf
    grep -v '^[[:space:]]*#' "$REPO/oci.conf.example" | grep -v '^[[:space:]]*$' > "$STATE/oci.conf"
    if [ "$NODES" -gt 1 ] && [ "$ver" = 22.05 ]; then
        # slurmstepd 22.05 gives a container the step's environment, not its task's:
        # scrun_py.oci.taskenv adds SLURM_PROCID, SLURM_NODEID, ... (docs/multinode.md)
        sed -i "s|^RunTimeRun=\"exec |RunTimeRun=\"exec $VENV/bin/python -m scrun_py.oci.taskenv %n %t %b -- |" \
            "$STATE/oci.conf"
        grep -q scrun_py.oci.taskenv "$STATE/oci.conf" ||
            { log "oci.conf: no RunTimeRun=\"exec ... to put scrun_py.oci.taskenv in front of"; exit 1; }
    fi
    chmod 644 "$STATE/slurm.conf" "$STATE/oci.conf"
    if [ "$NODES" -gt 1 ]; then
        # the scratch filesystem the login node and the nodes share (docs/site.md)
        install -d -m 1777 "$SCRATCH"
    fi
    if [ "$SITE" = 1 ]; then
        # the site's scrun.lua beside slurmctld's slurm.conf (configless ships it): the
        # shipped staging script with its bases on the shared scratch
        sed -e 's|^local STAGING_BASE = .*|local STAGING_BASE = "'"$SCRATCH"'/%u/scrun-staging"|' \
            -e 's|^local CACHE_BASE = .*|local CACHE_BASE = "'"$SCRATCH"'/%u/scrun-cache"|' \
            "$REPO/lua/scrun-staging.lua" > "$STATE/scrun.lua.new"
        grep -q "^local STAGING_BASE = \"$SCRATCH/" "$STATE/scrun.lua.new" &&
            grep -q "^local CACHE_BASE = \"$SCRATCH/" "$STATE/scrun.lua.new" ||
            { log "lua/scrun-staging.lua: no STAGING_BASE / CACHE_BASE setting to point at $SCRATCH"; exit 1; }
        chmod 644 "$STATE/scrun.lua.new"
        mv "$STATE/scrun.lua.new" "$STATE/scrun.lua"
        unlink_default_conf
    fi
}

# The site cluster's login node has no slurm.conf but sackd's: the links the one-node
# cluster of the release makes at the clients' compiled-in default go while it is up
# (and come back with "down", or the one-node cluster's "up").
unlink_default_conf() {
    local d f t
    for d in ${PREFIX:+"$PREFIX/etc"} /etc/slurm; do
        for f in slurm.conf oci.conf cgroup.conf scrun.lua; do
            t=$(readlink "$d/$f" 2>/dev/null) || continue
            [ "${t#"$STATE_BASE"}" != "$t" ] || continue
            log "configless login node: removing the link $d/$f -> $t"
            rm -f "$d/$f"
        done
    done
    if [ -e /etc/slurm/slurm.conf ] || { [ -n "$PREFIX" ] && [ -e "$PREFIX/etc/slurm.conf" ]; }; then
        log "configless login node: a slurm.conf of this machine's own is in the way" \
            "(/etc/slurm or $PREFIX/etc): Slurm's clients would read it instead of sackd's"
        exit 1
    fi
}

relink_default_conf() {  # the one-node cluster's links again, where it has a state dir
    local one=${STATE%-"${NODES}"n} f
    [ -n "$PREFIX" ] && [ -f "$one/slurm.conf" ] || return 0
    for f in slurm.conf oci.conf cgroup.conf; do
        [ -e "$PREFIX/etc/$f" ] || ln -sfn "$one/$f" "$PREFIX/etc/$f"
    done
}

write_plugstack() {
    # SPANK plugin stack: empty is the normal state.  tests/e2e/test_spank.py fills it
    # while it holds the lock $STATE/spank/.lock and empties it before letting go, so a
    # non-empty stack with the lock free was left by a killed test run: empty it.
    local f=$STATE/plugstack.conf
    if [ ! -f "$f" ]; then
        : > "$f"
    elif [ -s "$f" ] && { [ ! -e "$STATE/spank/.lock" ] || flock -n "$STATE/spank/.lock" true; }; then
        log "plugstack.conf left non-empty with no SPANK test running: emptying it"
        : > "$f"
    fi
    chmod 644 "$f"
}

# A pid file of this state dir names a live daemon of it: every daemon is started with a path
# under $STATE/ on its command line.  A pid file left from an earlier boot of this machine (CI
# runs on a copy of it, with no processes) may name an unrelated process now.
pid_alive() {
    local pid
    [ -f "$1" ] && pid=$(cat "$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        ! ps -o stat= -p "$pid" | grep -q Z &&
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$STATE/"
}

start_daemons() {
    install -d -o munge -g munge -m 755 /run/munge
    if ! munge -n </dev/null >/dev/null 2>&1; then
        log "starting munged"
        runuser -u munge -- /usr/sbin/munged
    fi
    if ! pid_alive "$STATE/ctld/slurmctld.pid"; then
        log "starting slurmctld"
        slurmctld -f "$STATE/slurm.conf"
    fi
    if [ "${CONF_CHANGED:-0}" = 1 ]; then
        log "slurm.conf changed: reconfiguring"
        SLURM_CONF=$STATE/slurm.conf scontrol reconfigure || true
    fi
    if [ "$NODES" -gt 1 ]; then
        start_nodes
        wait_nodes
        [ "$SITE" = 1 ] && start_sackd
        return 0
    fi
    if ! pid_alive "$STATE/slurmd.pid"; then
        log "starting slurmd"
        slurmd -f "$STATE/slurm.conf"
    fi
    local i h; h=$(hostname -s)
    # a node drained by an earlier run (e.g. "Kill task failed") would hold every job
    if SLURM_CONF=$STATE/slurm.conf sinfo -h -N -o %T 2>/dev/null | grep -Eq 'drain|drng|down'; then
        log "resuming drained node $h"
        SLURM_CONF=$STATE/slurm.conf scontrol update nodename="$h" state=resume 2>/dev/null || true
    fi
    for i in $(seq 1 200); do
        st=$(SLURM_CONF=$STATE/slurm.conf sinfo -h -N -o %T 2>/dev/null | head -1 || true)
        case "$st" in idle|mixed|allocated) return 0 ;; esac
        if [ "$i" = 50 ]; then SLURM_CONF=$STATE/slurm.conf scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true; fi
        sleep 0.1
    done
    log "node did not become idle (state: $st)"; return 1
}

start_nodes() {  # the slurmd (and munged) of each node of a multi-node cluster
    local i node mdir
    for i in $(seq 1 "$NODES"); do
        node=n$i
        mdir=$STATE/munge-$node
        if ! pid_alive "$mdir/munged.pid"; then
            # same key as the machine's munged; its dir belongs to munge and sits under
            # no world-writable dir, or munged refuses its socket and log
            log "starting munged of $node"
            install -d -o munge -g munge -m 755 "$mdir"
            rm -f "$mdir/munge.socket.2" "$mdir/munge.socket.2.lock"
            runuser -u munge -- /usr/sbin/munged --socket="$mdir/munge.socket.2" \
                --pid-file="$mdir/munged.pid" --seed-file="$mdir/munged.seed" \
                --log-file="$mdir/munged.log"
        fi
        pid_alive "$STATE/slurmd-$node.pid" && continue
        log "starting slurmd of $node"
        if [ "$SITE" = 1 ]; then
            start_site_node "$node" "$mdir"
            continue
        fi
        unshare --uts --mount --propagation private -- /bin/sh -c \
            'hostname "$1" && mount --bind "$2" /run/munge && exec slurmd -f "$3"' \
            sh "$node" "$mdir" "$STATE/slurm.conf"
    done
}

# A compute node of the site cluster (docs/site.md): its slurmd in a UTS and mount
# namespace of its own, with private tmpfs on /tmp, /var/tmp, /dev/shm and /run (its
# munged's socket bound on /run/munge), the login node's engine storage under empty
# read-only tmpfs, and its configuration fetched from slurmctld (configless).  /home and
# the scratch filesystem are the login node's.  The mounts live as long as the
# namespace, that is as long as the node's last process.
start_site_node() {  # NODE MUNGE_DIR
    local hide=() d
    # the engines' storage: the machine's, every cluster's private dockerd's (root and
    # rootless), the test users' rootless podman's; made now if missing, or the node would see what the
    # login node puts there later
    install -d -m 755 /var/lib/docker "$STATE/docker"
    install -d -m 700 /var/lib/containers
    install -d -m 755 "$ROOTLESS_STORAGE" "$STATE/rootless-docker"
    for d in /var/lib/docker /var/lib/containers "$ROOTLESS_STORAGE" "$STATE_BASE"*/docker \
             "$STATE_BASE"*/rootless-docker; do
        [ -d "$d" ] && hide+=("$d")
    done
    # -N: the node's name before its configuration is fetched, so that the spool dir's %n
    # (and its conf-cache, which "scontrol reconfigure" rewrites) is the node's own;
    # -L: the log file SlurmdLogFile names (%n), and this state dir on the command line
    # (pid_alive)
    unshare --uts --mount --propagation private -- /bin/sh -c '
        set -e
        node=$1 mdir=$2 server=$3 log=$4; shift 4
        hostname "$node"
        for d in /tmp /var/tmp /dev/shm; do
            mount -t tmpfs -o mode=1777,nosuid,nodev "tmpfs-$node" "$d"
        done
        mount -t tmpfs -o mode=755,nosuid,nodev "tmpfs-$node" /run
        mkdir -p /run/munge
        mount --bind "$mdir" /run/munge
        for d; do mount -t tmpfs -o ro,mode=755,nosuid,nodev "hidden-$node" "$d"; done
        exec slurmd --conf-server "$server" -N "$node" -L "$log"' \
        sh "$1" "$2" "127.0.0.1:$CTLD_PORT" "$STATE/slurmd-$1.log" "${hide[@]}"
}

sackd_pid() {  # the pid of this cluster's sackd, if it runs
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/exe" 2>/dev/null)" = "$(command -v "$SACKD")" ] || continue
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "--conf-server 127.0.0.1:$CTLD_PORT " &&
            running "${p#/proc/}" && { echo "${p#/proc/}"; return 0; }
    done
    return 0
}

# The login node of the site cluster: sackd fetches slurm.conf, oci.conf, scrun.lua
# (and cgroup.conf) from slurmctld into /run/slurm/conf, where Slurm's clients (and
# scrun-py) find them
start_sackd() {
    local other conf=/run/slurm/conf/slurm.conf i
    [ -n "$(sackd_pid)" ] && return 0
    command -v "$SACKD" >/dev/null ||
        { log "no sackd ($SACKD): the site cluster's login node needs Slurm's sackd"; exit 1; }
    other=$(sed -n 's/^ClusterName=//p' "$conf" 2>/dev/null || true)
    if [ -n "$other" ] && [ "$other" != "$CLUSTER_NAME" ] &&
       ps -e -o comm= | grep -qx sackd; then
        log "the sackd of cluster $other holds /run/slurm/conf: stop that site cluster first" \
            "(scripts/cluster.sh down --slurm R --nodes N)"
        exit 1
    fi
    log "starting sackd (configless login node, /run/slurm/conf)"
    # its RUNTIME_DIRECTORY, which systemd would make
    install -d -m 755 /run/slurm
    "$SACKD" --conf-server "127.0.0.1:$CTLD_PORT" </dev/null >/dev/null 2>&1
    for i in $(seq 1 200); do
        [ "$(sed -n 's/^ClusterName=//p' "$conf" 2>/dev/null)" = "$CLUSTER_NAME" ] &&
            [ -f /run/slurm/conf/oci.conf ] && [ -f /run/slurm/conf/scrun.lua ] &&
            [ -n "$(sackd_pid)" ] && return 0
        sleep 0.1
    done
    log "sackd did not fetch slurm.conf, oci.conf and scrun.lua into /run/slurm/conf:" \
        "$(ls /run/slurm/conf 2>&1 | tr '\n' ' ' || true)"
    return 1
}

stop_sackd() {
    [ "$SITE" = 1 ] || return 0
    # shellcheck disable=SC2046
    stop "sackd of $CLUSTER_NAME" $(sackd_pid)
    # the copies it fetched go with it: a login node without sackd has no configuration
    if [ "$(sed -n 's/^ClusterName=//p' /run/slurm/conf/slurm.conf 2>/dev/null)" = "$CLUSTER_NAME" ]; then
        rm -rf /run/slurm/conf
    fi
    relink_default_conf
}

wait_nodes() {  # every node idle (a node drained or down by an earlier run is resumed)
    local i st bad
    for i in $(seq 1 300); do
        st=$(SLURM_CONF=$STATE/slurm.conf sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)
        bad=$(echo "$st" | awk '$2 !~ /^(idle|mixed|allocated)$/ {print $1}')
        [ -n "$st" ] && [ -z "$bad" ] && [ "$(echo "$st" | wc -l)" -ge "$NODES" ] && return 0
        if [ $((i % 50)) = 0 ] && [ -n "$bad" ]; then
            log "resuming $(echo $bad)"
            for n in $bad; do
                SLURM_CONF=$STATE/slurm.conf scontrol update nodename="$n" state=resume 2>/dev/null || true
            done
        fi
        sleep 0.1
    done
    log "nodes did not become idle: $(echo $st)"; return 1
}

node_pids() {  # NODE: every process of that node: its UTS namespace and their descendants
    local pidf=$STATE/slurmd-$1.pid ns p
    pid_alive "$pidf" || return 0
    # only this cluster's slurmd, in a UTS namespace of its own: a stale pid file whose pid
    # now belongs to another process must not take the machine's namespace with it
    tr '\0' ' ' < "/proc/$(cat "$pidf")/cmdline" 2>/dev/null | grep -qF "$STATE/" || return 0
    ns=$(readlink "/proc/$(cat "$pidf")/ns/uts")
    [ "$ns" != "$(readlink /proc/$$/ns/uts)" ] || return 0
    # the namespace members, then their descendants (containers have UTS namespaces of their own)
    local members="" more=1
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/uts" 2>/dev/null)" = "$ns" ] && members="$members ${p#/proc/}"
    done
    while [ "$more" = 1 ]; do
        more=0
        for p in $(ps -e -o pid=,ppid= | awk -v set=" $members " 'index(set, " " $2 " ") && !index(set, " " $1 " ") {print $1}'); do
            members="$members $p"; more=1
        done
    done
    echo $members
}

sweep_runtime_state() {
    # crun's state of containers that no longer run (a killed test run leaves some): the
    # state dir of the clusters' oci.conf is /tmp/ocistate-%u, containers are named after
    # their job id, and a job id that comes again (a cluster whose state dir was made
    # anew) would meet "container already exists" and fail at once
    local d name st
    for d in /tmp/ocistate-*/*/; do
        [ -d "$d" ] || continue
        name=$(basename "$d")
        # a state crun cannot read (its runtime killed mid-write by a node crash) goes too
        st=$(crun --root="$(dirname "$d")" state "$name" 2>/dev/null |
             sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p') || st=""
        case "$st" in running|created|paused) ;; *) rm -rf -- "$d" ;; esac
    done
}

crash() {  # NODE
    local node=$1 pids
    [ "$NODES" -gt 1 ] || { echo "cluster.sh: crash needs --nodes N (N > 1)" >&2; exit 2; }
    pids=$(node_pids "$node")
    [ -n "$pids" ] || { echo "cluster.sh: node $node is not running" >&2; exit 1; }
    pid_alive "$STATE/munge-$node/munged.pid" && pids="$pids $(cat "$STATE/munge-$node/munged.pid")"
    log "crashing $node: SIGKILL to$(printf ' %s' $pids)"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
}

make_user() {
    # the test user, and a second ordinary user for the "other users are refused" tests
    local u uid home
    for u in "$TEST_USER" "$TEST_USER2"; do
        id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
        uid=$(id -u "$u")
        # a home left by an earlier user of the same name must belong to this one
        home=$(getent passwd "$u" | cut -d: -f6)
        [ "$(stat -c %u "$home")" = "$uid" ] || chown -R "$u:" "$home"
        install -d -o "$u" -g "$u" -m 700 "/run/user/$uid"
    done
}

make_venv() {
    # scrun-py goes into the virtualenv one of two ways, SCRUN_TEST_INSTALL says which:
    #   wheel     (the default under CI=true) the wheel sites install, with the test extra:
    #             dist/'s, built by scripts/build.sh unless it is the wheel of the checkout
    #             as it is (--if-stale), or the one $SCRUN_TEST_WHEEL names
    #   editable  (the default otherwise) the checkout itself, so that an edit takes effect
    #             at once; a copy of it where the test user cannot read the checkout
    local mode=${SCRUN_TEST_INSTALL:-}
    if [ -z "$mode" ]; then
        if [ "${CI:-}" = true ]; then mode=wheel; else mode=editable; fi
    fi
    case "$mode" in
        wheel|editable) ;;
        *) echo "cluster.sh: SCRUN_TEST_INSTALL is wheel or editable, not '$mode'" >&2; exit 2 ;;
    esac
    # Debian's python3: the machine's default python may live in a private home directory.
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating virtualenv $VENV"
        mkdir -p "$(dirname "$VENV")"
        /usr/bin/python3 -m venv "$VENV"
    fi
    local src=$REPO stamp whl=""
    if [ "$mode" = wheel ]; then
        whl=${SCRUN_TEST_WHEEL:-$("$REPO/scripts/build.sh" --if-stale)}
        [ -f "$whl" ] || { echo "cluster.sh: no wheel '$whl'" >&2; exit 1; }
        # the wheel's RECORD (every file's sha256, the commit's among them): a wheel built
        # again from the same tree is the same install
        stamp="wheel $whl $(/usr/bin/python3 -P -c 'import hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
print(hashlib.sha256(z.read(record)).hexdigest()[:32])' "$whl")"
    elif runuser -u "$TEST_USER" -- test -r "$REPO/scrun_py/__init__.py" 2>/dev/null; then
        # An editable install follows the checkout, but the test user runs scrun-py from it:
        # what an editable install copies (the command's script) renews it too
        stamp="editable-compat $REPO $(cd "$REPO" && cat pyproject.toml bin/scrun-py | md5sum | cut -c1-32)"
    else
        # a checkout the user cannot read (root's home is 0700) gets a copy, renewed when
        # the checkout's files change
        stamp="copy $REPO $(cd "$REPO" && find scrun_py bin pyproject.toml -type f -newer "$VENV/bin/python" \
                 -printf '%p %T@\n' 2>/dev/null | sort | md5sum | cut -c1-32)"
    fi
    # from /, where no scrun_py of a checkout is on python's path
    if ! (cd / && "$VENV/bin/python" -c 'import scrun_py, lupa, pytest') 2>/dev/null ||
       [ "$(cat "$VENV/.scrun-src" 2>/dev/null)" != "$stamp" ]; then
        log "installing scrun-py into $VENV (${stamp%% *})"
        "$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
        if [ "$mode" = wheel ]; then
            # whatever scrun-py was there (an editable install's path entry, a copy) goes
            # first; the rest of the virtualenv stays (pyslurm.sh's pyslurm takes 4 minutes)
            "$VENV/bin/pip" uninstall -q -y scrun-py >/dev/null 2>&1 || true
            "$VENV/bin/pip" install -q --no-deps "$whl" >/dev/null
            "$VENV/bin/pip" install -q "$whl[test]" >/dev/null
        elif [ "${stamp%% *}" = editable-compat ]; then
            # compat mode: a .pth path entry, not an import hook (a finder costs every
            # short command 8-13 ms of start-up, which an ordinary install does not have)
            "$VENV/bin/pip" install -q -e "$src[test]" --config-settings editable_mode=compat >/dev/null
        else
            "$VENV/bin/pip" install -q --force-reinstall --no-deps "$src" >/dev/null
            "$VENV/bin/pip" install -q "$src[test]" >/dev/null
        fi
        echo "$stamp" > "$VENV/.scrun-src"
    fi
    chmod -R a+rX "$(dirname "$VENV")"
}

# -- stopping: every daemon is waited for until it is gone, so that an "up" right after
# starts it again and no daemon is left half-stopped
# shellcheck source=scripts/stop-lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/stop-lib.sh"

stop_slurm() {  # the cluster's slurmd(s), the munged of each of its nodes, its slurmctld
    local f pids=()
    for f in "$STATE/slurmd.pid" "$STATE"/slurmd-n*.pid "$STATE"/munge-n*/munged.pid \
             "$STATE/ctld/slurmctld.pid"; do
        pid_alive "$f" && pids+=("$(cat "$f")")
    done
    stop "the daemons of $CLUSTER_NAME" ${pids[@]+"${pids[@]}"}
}

cancel_jobs() {  # the cluster's jobs: a job's steps would run on without a slurmd
    pid_alive "$STATE/ctld/slurmctld.pid" || return 0
    local jobs
    jobs=$(SLURM_CONF=$STATE/slurm.conf squeue -h -o %A 2>/dev/null || true)
    [ -n "$jobs" ] || return 0
    log "cancelling the jobs of $CLUSTER_NAME: ${jobs//$'\n'/ }"
    # shellcheck disable=SC2086
    SLURM_CONF=$STATE/slurm.conf scancel $jobs 2>/dev/null || true
    for _ in $(seq 1 200); do
        [ -z "$(SLURM_CONF=$STATE/slurm.conf squeue -h -o %A 2>/dev/null || true)" ] && return 0
        sleep 0.1
    done
    log "jobs of $CLUSTER_NAME still there after 20 s: $(SLURM_CONF=$STATE/slurm.conf squeue -h -o '%A %T' 2>/dev/null | tr '\n' ' ')"
}

clear_scratch() {  # what the test users' containers left on the shared scratch
    # (the staging script's caches and copies, Slurm's scrun's scratch_path), once no
    # other multi-node cluster, which shares the scratch, is up
    [ "$NODES" -gt 1 ] && [ -d "$SCRATCH" ] || return 0
    local f d u uid
    for f in "$STATE_BASE"*n/ctld/slurmctld.pid; do
        d=${f%/ctld/slurmctld.pid}
        [ "$d" = "$STATE" ] && continue
        STATE=$d pid_alive "$f" && return 0
    done
    for u in root "$TEST_USER" "$TEST_USER2"; do
        uid=$(id -u "$u" 2>/dev/null) || continue
        [ -d "$SCRATCH/$uid" ] || continue
        rm -rf "${SCRATCH:?}/$uid/scrun-staging" "$SCRATCH/$uid/scrun-cache" "$SCRATCH/$uid/slurm"
        rmdir "$SCRATCH/$uid" 2>/dev/null || true
    done
}

down() {  # what "up" started for this cluster
    # the engines first: dockerd ends its containers through scrun-py, which needs Slurm
    "$REPO/scripts/engines.sh" down || true
    cancel_jobs
    stop_sackd
    stop_slurm
    clear_scratch
}

down_all() {  # every cluster of every release, the engines and the machine's munged
    local rel rc=0
    for rel in $(releases); do
        (
            RELEASE=$rel NODES=1
            resolve_release
            one=$STATE
            # the one-node cluster's state dir, and the multi-node ones' ($STATE-<N>n)
            for d in "$one" "$one"-*n; do
                n=${d#"$one"}; n=${n#-}; n=${n%n}
                case "${n:-1}" in *[!0-9]*) continue ;; esac
                [ -f "$d/slurm.conf" ] || continue
                NODES=${n:-1}
                resolve_release
                down
            done
        ) || rc=1
    done
    SCRUN_TEST_STATE=$STATE_BASE "$REPO/scripts/engines.sh" down --all || rc=1
    local pid
    pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = /usr/sbin/munged ]; then
        stop munged "$pid"
    fi
    return $rc
}

testable_releases() {  # the releases whose source can be had here
    local rel why
    for rel in $(releases); do
        if why=$("$REPO/scripts/slurm-build.sh" --available "$rel"); then echo "$rel"
        else echo "[cluster] $why" >&2; fi
    done
}

if [ "$CMD" = releases ]; then
    if [ "$ALL" = 1 ]; then testable_releases; else releases; fi
    exit 0
fi
if [ "$ALL" = 1 ]; then down_all; exit; fi
resolve_release

case "$CMD" in
    up)
        if [ "$NODES" -gt 1 ] && [ "$SITE" = 0 ]; then
            log "Slurm $RELEASE has no sackd: configless login node and site topology need 23.11+; the $NODES nodes share this machine's filesystem"
        fi
        install_packages
        fix_host
        write_conf
        if [ "${PORTS_CHANGED:-0}" = 1 ]; then log "ports changed: restarting the daemons"; stop_slurm; CONF_CHANGED=0; fi
        start_daemons
        sweep_runtime_state
        make_user
        make_venv
        # the release's pyslurm, where it has one (the suite then runs on the pyslurm backend)
        "$REPO/scripts/pyslurm.sh" install "$RELEASE" "$PREFIX" "$VENV" "$STATE/slurm.conf"
        chmod -R a+rX "$(dirname "$VENV")"
        if [ "$WITH_ENGINES" = 1 ]; then
            # the site cluster's engines call scrun-py with the login node's configuration:
            # sackd's copies in /run/slurm/conf
            if [ "$SITE" = 1 ]; then export SCRUN_TEST_ENGINE_CONF=/run/slurm/conf; fi
            "$REPO/scripts/engines.sh" up
        fi
        if [ "$SITE" = 1 ]; then
            log "cluster up: Slurm $RELEASE, site topology of $NODES nodes, configless login node" \
                "(/run/slurm/conf; controller's SLURM_CONF=$STATE/slurm.conf) ($(slurmd -V))"
        else
            log "cluster up: Slurm $RELEASE, SLURM_CONF=$STATE/slurm.conf ($(slurmd -V))"
        fi
        ;;
    down) down ;;
    crash) crash "$NODE_ARG" ;;
    reconfigure)
        # the controller's files changed (a new scrun.lua beside its slurm.conf): slurmctld
        # and the nodes read them again, and the login node's sackd fetches them anew (its
        # registration does not outlive slurmctld's restart on reconfigure, so no push
        # reaches it)
        SLURM_CONF=$STATE/slurm.conf scontrol reconfigure
        if [ "$SITE" = 1 ]; then
            # shellcheck disable=SC2046
            stop "sackd of $CLUSTER_NAME" $(sackd_pid)
            rm -rf /run/slurm/conf
            start_sackd
        fi
        ;;
    env)
        # the site cluster's login node is configless: no SLURM_CONF, as at a site
        if [ "$SITE" = 1 ]; then
            echo "SCRUN_TEST_SITE=1"
            echo "SCRUN_TEST_SCRATCH=$SCRATCH"
            # scripts/engines.sh (run by the engine tests too): the engines' scrun-py reads
            # the login node's configuration, sackd's copies
            echo "SCRUN_TEST_ENGINE_CONF=/run/slurm/conf"
        else
            echo "SLURM_CONF=$STATE/slurm.conf"
        fi
        echo "SCRUN_TEST_STATE=$STATE"
        echo "SCRUN_TEST_SLURM=$RELEASE"
        echo "SCRUN_TEST_SLURM_PREFIX=$PREFIX"
        [ -n "$PREFIX" ] && echo "PATH=$PATH"
        echo "SCRUN_TEST_USER=$TEST_USER"
        echo "SCRUN_TEST_USER2=$TEST_USER2"
        echo "SCRUN_TEST_VENV=$VENV"
        echo "SCRUN_TEST_NODES=$NODES"
        # 1: this release's tests require pyslurm (scripts/pyslurm.sh installs it)
        if [ -n "$("$REPO/scripts/pyslurm.sh" for "$RELEASE")" ] && [ "${SCRUN_TEST_PYSLURM:-1}" != 0 ]; then
            echo "SCRUN_TEST_PYSLURM=1"
        else
            echo "SCRUN_TEST_PYSLURM=0"
        fi
        ;;
    *) echo "usage: $0 up|down [--all]|env|releases|reconfigure [--slurm RELEASE] [--nodes N]" >&2; exit 2 ;;
esac
