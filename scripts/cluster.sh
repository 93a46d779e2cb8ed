#!/bin/bash
# Bring up (or tear down) a real one-node Slurm cluster for scrun-py on this machine.
#
#   scripts/cluster.sh up     install packages, start munge + slurmctld + slurmd, make the
#                             test user and a world-readable virtualenv with scrun-py in it
#   scripts/cluster.sh down   stop the daemons started by "up"
#   scripts/cluster.sh env    print the environment the tests use
#
# Must run as root on Debian 12 (Slurm 22.05) or Debian 13 (Slurm 24.11). Idempotent.
set -euo pipefail

STATE=${SCRUN_TEST_STATE:-/var/lib/scrun-py-test}
TEST_USER=${SCRUN_TEST_USER:-scruntest}
TEST_USER2=${SCRUN_TEST_USER2:-scruntest2}
VENV=${SCRUN_TEST_VENV:-/opt/scrun-py/venv}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WITH_ENGINES=${WITH_ENGINES:-1}

log() { printf '[cluster] %s\n' "$*" >&2; }

install_packages() {
    # gcc + libslurm-dev (slurm/spank.h): tests/e2e/test_spank.py compiles SPANK plugins
    local pkgs=(munge slurmctld slurmd slurm-client crun runc busybox-static uidmap rsync rsyslog
                python3-venv procps util-linux gcc libslurm-dev)
    [ "$WITH_ENGINES" = 1 ] && pkgs+=(podman docker.io)
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing: ${missing[*]}"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
    fi
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
    chown slurm "$STATE/ctld"
    chmod 755 "$STATE"
    {
        cat <<CONF
ClusterName=scrunpy
SlurmctldHost=$h(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/ctld/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/ctld/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
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
        case "$ver" in
            22.05) printf 'SchedulerType=sched/backfill\nSwitchType=switch/none\nSlurmctldTimeout=30\nSlurmdTimeout=30\n' ;;
        esac
        echo "NodeName=$h NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
        # oversubscribed so the load tests (50 containers) and benchmarks (20 running at
        # once) fit on a 2-CPU machine: CPUs x 32 job slots
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:32"
        echo "PartitionName=other Nodes=ALL Default=NO MaxTime=60 State=UP OverSubscribe=FORCE:32"
    } > "$STATE/slurm.conf.new"
    if [ -f "$STATE/slurm.conf" ] && ! cmp -s "$STATE/slurm.conf.new" "$STATE/slurm.conf"; then
        CONF_CHANGED=1
    fi
    mv "$STATE/slurm.conf.new" "$STATE/slurm.conf"
    case "$ver" in
        22.05) ;;
        *) echo "CgroupPlugin=disabled" > "$STATE/cgroup.conf" ;;
    esac
    write_plugstack
    # the active block of oci.conf.example is the cluster's oci.conf
    grep -v '^[[:space:]]*#' "$REPO/oci.conf.example" | grep -v '^[[:space:]]*$' > "$STATE/oci.conf"
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

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && ! ps -o stat= -p "$(cat "$1")" | grep -q Z; }

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
    # Debian's python3: the machine's default python may live in a private home directory.
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating virtualenv $VENV"
        mkdir -p "$(dirname "$VENV")"
        /usr/bin/python3 -m venv "$VENV"
    fi
    if ! "$VENV/bin/python" -c 'import scrun_py, lupa, pytest' 2>/dev/null ||
       [ "$(cat "$VENV/.scrun-src" 2>/dev/null)" != "$REPO" ]; then
        log "installing scrun-py into $VENV"
        "$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
        "$VENV/bin/pip" install -q -e "$REPO[test]" >/dev/null
        echo "$REPO" > "$VENV/.scrun-src"
    fi
    chmod -R a+rX "$(dirname "$VENV")"
}

down() {
    for d in slurmd ctld/slurmctld; do
        if [ -f "$STATE/$d.pid" ]; then kill "$(cat "$STATE/$d.pid")" 2>/dev/null || true; fi
    done
}

case "${1:-up}" in
    up)
        install_packages
        fix_host
        write_conf
        start_daemons
        make_user
        make_venv
        [ "$WITH_ENGINES" = 1 ] && "$REPO/scripts/engines.sh" up
        log "cluster up: SLURM_CONF=$STATE/slurm.conf ($(slurmd -V))"
        ;;
    down) down ;;
    env)
        echo "SLURM_CONF=$STATE/slurm.conf"
        echo "SCRUN_TEST_USER=$TEST_USER"
        echo "SCRUN_TEST_USER2=$TEST_USER2"
        echo "SCRUN_TEST_VENV=$VENV"
        ;;
    *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
