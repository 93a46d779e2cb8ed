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
# SlurmdTimeout=10, so a crashed node ends its jobs within a minute.  The nodes share this
# machine's filesystem.  22.05's oci.conf there puts scrun_py.oci.taskenv in front of the
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
        --all) [ "$CMD" = down ] || { echo "cluster.sh: --all is for down" >&2; exit 2; }; ALL=1; shift ;;
        *) echo "usage: $0 up|down [--all]|env|releases|crash NODE [--slurm RELEASE] [--nodes N]" >&2; exit 2 ;;
    esac
done
case "$NODES" in ''|*[!0-9]*|0) echo "cluster.sh: --nodes needs a positive number" >&2; exit 2 ;; esac
TEST_USER=${SCRUN_TEST_USER:-scruntest}
TEST_USER2=${SCRUN_TEST_USER2:-scruntest2}
VENV=${SCRUN_TEST_VENV:-/opt/scrun-py/venv}
WITH_ENGINES=${WITH_ENGINES:-1}
STATE_BASE=${SCRUN_TEST_STATE_BASE:-/var/lib/scrun-py-test}

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
    {
        cat <<CONF
ClusterName=$CLUSTER_NAME
SlurmctldHost=$h(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
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
        # oversubscribed so the load tests (50 containers) and benchmarks (20 running at
        # once) fit on a 2-CPU machine: CPUs x 32 job slots
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:32"
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
        return
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
        unshare --uts --mount --propagation private -- /bin/sh -c \
            'hostname "$1" && mount --bind "$2" /run/munge && exec slurmd -f "$3"' \
            sh "$node" "$mdir" "$STATE/slurm.conf"
    done
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
    tr '\0' ' ' < "/proc/$(cat "$pidf")/cmdline" 2>/dev/null | grep -qF "$STATE/slurm.conf" || return 0
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

down() {  # what "up" started for this cluster
    # the engines first: dockerd ends its containers through scrun-py, which needs Slurm
    "$REPO/scripts/engines.sh" down || true
    cancel_jobs
    stop_slurm
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

[ "$CMD" = releases ] && { releases; exit 0; }
if [ "$ALL" = 1 ]; then down_all; exit; fi
resolve_release

case "$CMD" in
    up)
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
        [ "$WITH_ENGINES" = 1 ] && "$REPO/scripts/engines.sh" up
        log "cluster up: Slurm $RELEASE, SLURM_CONF=$STATE/slurm.conf ($(slurmd -V))"
        ;;
    down) down ;;
    crash) crash "$NODE_ARG" ;;
    env)
        echo "SLURM_CONF=$STATE/slurm.conf"
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
    *) echo "usage: $0 up|down [--all]|env|releases [--slurm RELEASE]" >&2; exit 2 ;;
esac
