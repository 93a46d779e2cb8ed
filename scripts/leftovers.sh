#!/bin/bash
# The processes of a test run that still run at its end (scripts/test.sh calls it after
# "cluster.sh down --all"):
#
#   scripts/leftovers.sh          list them
#   scripts/leftovers.sh --kill   list them, then end them (SIGTERM, SIGKILL after 10 s)
#
# A process belongs to the run when
#   - its environment has SCRUN_PY_TEST_RUN=<the run's id>: test.sh exports it, and every
#     process it starts inherits it, daemons that double-fork included (a process started
#     with an empty environment, such as `env -i`, or one that overwrites its environment
#     to set its title, such as slurmscriptd, does not have it), or
#   - it is in the cgroup v2 directory SCRUN_PY_TEST_CGROUP or below it (test.sh makes one
#     and moves itself in where cgroup v2 is writable): children stay in their parent's
#     cgroup whatever their environment; a process moved to another cgroup (a container
#     of docker) leaves it.
# This script, its ancestors (test.sh) and the commands it runs are not leftovers.  A
# zombie neither runs nor has an environment or a cgroup: it is not listed.
#
# Exit status: 0 when nothing is left (one line says so); when something is, the list goes
# to stderr and the status is 1 under CI=true, 0 otherwise (a warning).  2: no
# SCRUN_PY_TEST_RUN.
set -euo pipefail
KILL=0
case "${1:-}" in
    --kill) KILL=1 ;;
    "") ;;
    *) echo "usage: $0 [--kill]" >&2; exit 2 ;;
esac
RUN=${SCRUN_PY_TEST_RUN:-}
[ -n "$RUN" ] || { echo "leftovers.sh: SCRUN_PY_TEST_RUN is not set" >&2; exit 2; }
CG=${SCRUN_PY_TEST_CGROUP:-}

log() { printf '[leftovers] %s\n' "$*" >&2; }

ppid_of() {  # PID: its parent's pid, empty once it is gone
    local line
    while read -r line; do
        case "$line" in PPid:*) echo "${line##*[[:space:]]}"; return 0 ;; esac
    done 2>/dev/null < "/proc/$1/status" || true
}

running() {  # PID: the process exists and is not a zombie
    local stat
    read -r stat 2>/dev/null < "/proc/$1/stat" || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# this script and its ancestors
self=" "
p=$$
while [ -n "$p" ] && [ "$p" -gt 1 ]; do self="$self$p "; p=$(ppid_of "$p"); done

mine() {  # PID: this script, an ancestor, or a command this script runs
    local p=$1
    case "$self" in *" $p "*) return 0 ;; esac
    while [ -n "$p" ] && [ "$p" -gt 1 ]; do
        [ "$p" = $$ ] && return 0
        p=$(ppid_of "$p")
    done
    return 1
}

candidates() {
    # the environment is one NUL-terminated VAR=value each
    grep -lszxF "SCRUN_PY_TEST_RUN=$RUN" /proc/[0-9]*/environ | cut -d/ -f3 || true
    if [ -n "$CG" ] && [ -d "$CG" ]; then
        find "$CG" -name cgroup.procs -exec cat {} + 2>/dev/null || true
    fi
}

list() {
    local p
    for p in $(candidates | sort -un); do
        running "$p" && ! mine "$p" && echo "$p"
    done
    return 0
}

mapfile -t LEFT < <(list)
if [ ${#LEFT[@]} = 0 ]; then log "no process of this test run is left"; exit 0; fi
log "${#LEFT[@]} process(es) of this test run still running (SCRUN_PY_TEST_RUN=$RUN${CG:+, cgroup $CG}):"
ps -o pid,ppid,pgid,sid,stat,etime,user,args -p "$(IFS=,; echo "${LEFT[*]}")" >&2 || true
if [ "$KILL" = 1 ]; then
    log "ending them: SIGTERM"
    kill -TERM "${LEFT[@]}" 2>/dev/null || true
    for _ in $(seq 1 100); do
        still=()
        for p in "${LEFT[@]}"; do running "$p" && still+=("$p"); done
        [ ${#still[@]} -gt 0 ] || break
        sleep 0.1
    done
    if [ ${#still[@]} -gt 0 ]; then
        log "still running after 10 s: SIGKILL to ${still[*]}"
        kill -KILL "${still[@]}" 2>/dev/null || true
    fi
fi
if [ "${CI:-}" = true ]; then
    log "a test run leaves no process behind under CI=true: failing"
    exit 1
fi
log "warning: a test run should leave no process behind (a failure under CI=true)"
