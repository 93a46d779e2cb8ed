#!/bin/bash
# The whole test suite against real services, on every Slurm release the project tests.
# Run as root on Debian 12/13:
#
#   scripts/test.sh [pytest args]             the full suite (unit, end-to-end as root and as
#                                             an ordinary user, ruff, mypy, podman's system
#                                             tests) on the machine's packaged Slurm; then,
#                                             on every other release of scripts/releases.conf
#                                             whose source can be had here, the release
#                                             suite below (a release built from SchedMD's
#                                             tarball needs it in $SCRUN_SLURM_MIRROR: one
#                                             line says which releases are not tested)
#   scripts/test.sh --slurm R [pytest args]   the full suite on release R only
#
# First the sdist and the wheel are built and checked (scripts/build.sh: python -m build,
# twine check).  Under CI=true every cluster's "up" installs that wheel into the test
# virtualenv, as sites install scrun-py; otherwise the checkout, editable
# (SCRUN_TEST_INSTALL=wheel|editable chooses, scripts/cluster.sh).
#
# Each release's cluster is brought up first (idempotent; a release that is not packaged is
# built once into /opt/slurm/R, about 6 minutes).  A release built from an upstream tarball
# takes it from $SCRUN_SLURM_MIRROR (a directory of downloads) when it is there.  On every
# release, the multi-node tests (tests/e2e/test_multinode.py) then run against that
# release's 3-node cluster
# (scripts/cluster.sh up --slurm R --nodes 3), with the pytest args that are not paths.
# On 23.11 and later that cluster is the site topology (docs/site.md: a configless login
# node with sackd, nodes that share only /home and /shared/scratch with it), and its run
# adds tests/e2e/test_site.py; 22.05's nodes share the machine's filesystem.
# Once a release's tests are done, its clusters are stopped (scripts/cluster.sh down).
#
# The run stops what it started at its end, on success, on failure and on Ctrl-C or
# SIGTERM: the pytest run under way (SIGINT, as Ctrl-C, so that its fixtures tear down),
# the background builds, every cluster with its engines and munged (scripts/cluster.sh
# down --all).  Then scripts/leftovers.sh lists and ends every process the run started that
# still runs: a failure under CI=true, a warning otherwise.  The run's processes are those
# with SCRUN_PY_TEST_RUN=<the run's id> in their environment and those in the cgroup v2
# directory scrun-py-test-<pid> that test.sh makes below its own cgroup and moves into
# (where cgroup v2 is mounted and writable).
#
#   SCRUN_TEST_DRY_RUN=N scripts/test.sh --slurm R
#       every pytest run is replaced by `sleep N`: the clusters go up and down and the
#       leftover check runs, no test does (a check of this script's start and stop)
set -euo pipefail
# test.sh is a child subreaper (prctl PR_SET_CHILD_SUBREAPER, kept across exec): a daemon
# that its commands start and that leaves its parent (a double fork) becomes test.sh's
# child, and test.sh reaps it once it is stopped, whatever the machine's init does
if [ "${SCRUN_PY_TEST_PID:-}" != $$ ]; then
    SCRUN_PY_TEST_PID=$$
    SCRUN_PY_TEST_RUN=$(cat /proc/sys/kernel/random/uuid)
    export SCRUN_PY_TEST_PID SCRUN_PY_TEST_RUN
    if [ -x /usr/bin/python3 ]; then
        exec /usr/bin/python3 -c 'import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("test.sh: prctl(PR_SET_CHILD_SUBREAPER): " + os.strerror(ctypes.get_errno()))
os.execv("/bin/bash", ["bash", *sys.argv[1:]])' "$0" "$@"
    fi
    echo "[test] no /usr/bin/python3: test.sh is not a subreaper" >&2
fi
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
ONLY=""
if [ "${1:-}" = --slurm ]; then ONLY=${2:?--slurm needs a release}; shift 2; fi
# the end-to-end tests run on every release besides the packaged one: lifecycle, engines,
# exec, hooks, faults, SPANK, staging, the comparison with Slurm's own scrun, and the
# backend contract (on a release with pyslurm, scripts/pyslurm.sh: the whole suite on the
# pyslurm backend); the unit tests, ruff and mypy run once, on the packaged release
RELEASE_SUITE=(tests/e2e/test_lifecycle.py tests/e2e/test_engines.py tests/e2e/test_hooks.py
               tests/e2e/test_exec.py tests/e2e/test_staging_cache.py
               tests/e2e/test_faults.py tests/e2e/test_spank.py tests/e2e/test_versus_scrun.py
               tests/e2e/test_release.py tests/e2e/test_backend_contract.py
               tests/e2e/test_backend_choice.py)

MULTINODE=tests/e2e/test_multinode.py
# on a release with sackd (23.11+) the multi-node cluster is the site topology
# (docs/site.md): its run adds the site tests (SITE_ONLY: not run on a one-node cluster)
# and the one-node tests of the container's life, the engines, staging and its cache, exec
# and the hooks, there with the bundles on the scratch and the engines on the login node
SITE_ONLY=(tests/e2e/test_site.py)
SITE_SUITE=("${SITE_ONLY[@]}" tests/e2e/test_lifecycle.py tests/e2e/test_engines.py
            tests/e2e/test_staging_cache.py tests/e2e/test_exec.py tests/e2e/test_hooks.py)
# releases with sackd: their multi-node cluster is the site topology
has_site() { [ "$(printf '%s\n' "$1" 23.11 | sort -V | head -1)" = 23.11 ]; }
# the release suite's one-node part: on a release with the site topology, what its site
# run (SITE_SUITE) runs already is left out
release_suite() {  # RELEASE
    local f s keep
    for f in "${RELEASE_SUITE[@]}"; do
        keep=1
        if has_site "$1"; then for s in "${SITE_SUITE[@]}"; do [ "$f" = "$s" ] && keep=0; done; fi
        [ "$keep" = 0 ] || echo "$f"
    done
}
# releases that get the whole suite besides the packaged one (none unless asked: the unit
# tests do not depend on the release)
read -r -a FULL_SUITE_RELEASES <<<"${SCRUN_FULL_SUITE_RELEASES:-}"
is_full() { local r; for r in "${FULL_SUITE_RELEASES[@]}"; do [ "$r" = "$1" ] && return 0; done; return 1; }
# A pytest run goes in the background (FG) and is waited for: bash runs a trap only once
# the command in its foreground has ended, but interrupts `wait` for it.  The run is
# `timeout`, in a process group of its own, which passes SIGINT and SIGTERM on to pytest.
FG=""
exec_pytest() {  # [pytest args...]: in the subshell with the cluster's environment
    if [ -n "${SCRUN_TEST_DRY_RUN:-}" ]; then exec sleep "$SCRUN_TEST_DRY_RUN"; fi
    exec timeout "${SCRUN_TEST_TIMEOUT:-4800}" "$SCRUN_TEST_VENV/bin/python" -m pytest \
        -p no:cacheprovider "$@"
}
wait_fg() {
    local rc=0
    wait "$FG" || rc=$?
    FG=""
    return "$rc"
}

run_on() {  # RELEASE [pytest args...]: the one-node cluster, without the multi-node tests
    local rel=$1; shift
    "$REPO/scripts/cluster.sh" up --slurm "$rel"
    (
        eval "$("$REPO/scripts/cluster.sh" env --slurm "$rel" | sed 's/^/export /')"
        # a release with pyslurm runs on the pyslurm backend: forced, so that a pyslurm
        # that cannot be used fails every create instead of passing on the CLI
        if [ "$SCRUN_TEST_PYSLURM" = 1 ]; then export SCRUN_PY_SLURM_BACKEND=pyslurm; fi
        echo "[test] Slurm $rel (backend ${SCRUN_PY_SLURM_BACKEND:-auto}): pytest $*" >&2
        # under CI=true a skip not on tests/conftest.py's allow-list is a failure
        # the multi-node and site tests run on the 3-node cluster (run_multinode_on)
        exec_pytest --ignore="$MULTINODE" "${SITE_ONLY[@]/#/--ignore=}" "$@"
    ) <&0 &
    FG=$!
    wait_fg
}

run_multinode_on() {  # RELEASE [pytest args...]: the release's 3-node cluster
    local rel=$1 a opts=(); shift
    # the pytest args but the test paths (they name one-node tests)
    for a in "$@"; do [ -e "${a%%::*}" ] || opts+=("$a"); done
    "$REPO/scripts/cluster.sh" up --slurm "$rel" --nodes 3
    (
        eval "$("$REPO/scripts/cluster.sh" env --slurm "$rel" --nodes 3 | sed 's/^/export /')"
        local tests=("$MULTINODE")
        if [ "${SCRUN_TEST_SITE:-0}" = 1 ]; then
            tests+=("${SITE_SUITE[@]}")
            # the bundles the tests make go to the shared scratch (tests/e2e/conftest.py),
            # and so does pytest's own tmp_path
            opts+=("--basetemp=$SCRUN_TEST_SCRATCH/scrun-py-pytest-$$")
            echo "[test] Slurm $rel, site topology of 3 nodes (configless login node)" >&2
        fi
        echo "[test] Slurm $rel, 3 nodes: pytest ${opts[*]} ${tests[*]}" >&2
        exec_pytest "${opts[@]}" "${tests[@]}"
    ) <&0 &
    FG=$!
    wait_fg
}

# crun's TAP of the files this run's first podman system tests ran with crun (only those
# in which scrun-py failed a test off the allow-list): the releases after it take them
# (crun's results do not depend on Slurm) rather than running crun on them again
SYSTEST_CRUN=""
run_podman_systest_on() {  # RELEASE: podman's own system tests, crun beside scrun-py
    [ -z "${SCRUN_TEST_DRY_RUN:-}" ] && [ "${SCRUN_PODMAN_SYSTEST:-1}" = 1 ] || return 0
    # the cluster as "up" leaves it (idempotent): a daemon the suite before stopped and
    # did not bring back is started again, rather than failing every podman test
    "$REPO/scripts/cluster.sh" up --slurm "$1"
    local state rc=0
    state=$("$REPO/scripts/cluster.sh" env --slurm "$1" | sed -n 's/^SCRUN_TEST_STATE=//p')
    (
        eval "$("$REPO/scripts/cluster.sh" env --slurm "$1" | sed 's/^/export /')"
        if [ -n "$SYSTEST_CRUN" ]; then export SCRUN_SYSTEST_CRUN_RESULTS=$SYSTEST_CRUN; fi
        exec "$REPO/scripts/podman-systest.sh"
    ) <&0 &
    FG=$!
    wait_fg || rc=$?
    if [ -z "$SYSTEST_CRUN" ] && [ -d "$state/podman-systest/results/crun" ]; then
        SYSTEST_CRUN=/var/tmp/scrun-py-test/systest-crun-$$
        rm -rf "$SYSTEST_CRUN"
        mkdir -p /var/tmp/scrun-py-test
        cp -r "$state/podman-systest/results/crun" "$SYSTEST_CRUN"
    fi
    return "$rc"
}

down_release() {  # RELEASE: its clusters, once its tests are done (memory for the next)
    "$REPO/scripts/cluster.sh" down --slurm "$1" || true
    "$REPO/scripts/cluster.sh" down --slurm "$1" --nodes 3 || true
}

CGROUP_FROM=""
SCRUN_PY_TEST_CGROUP=""
PREBUILD=""
# shellcheck disable=SC2317  # the EXIT trap's
cleanup() {
    local rc=$?
    set +e
    trap - EXIT
    # the clean-up runs to its end: a second Ctrl-C does not cut it short
    trap '' INT TERM
    if [ -n "$FG" ]; then
        echo "[test] stopping the pytest run (SIGINT)" >&2
        kill -INT "$FG" 2>/dev/null
        for _ in $(seq 1 600); do kill -0 "$FG" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$FG" 2>/dev/null; then
            echo "[test] the pytest run still runs after 60 s: SIGKILL" >&2
            kill -KILL -- -"$FG" "$FG" 2>/dev/null
        fi
        wait "$FG" 2>/dev/null
    fi
    if [ -n "$PREBUILD" ]; then
        # its process group: the loop, slurm-build.sh and the compilers it runs
        kill -TERM -- -"$PREBUILD" 2>/dev/null
        wait "$PREBUILD" 2>/dev/null
    fi
    [ -z "$SYSTEST_CRUN" ] || rm -rf "$SYSTEST_CRUN"
    "$REPO/scripts/cluster.sh" down --all || echo "[test] cluster.sh down --all failed" >&2
    "$REPO/scripts/leftovers.sh" --kill || rc=$((rc == 0 ? 1 : rc))
    if [ -n "$SCRUN_PY_TEST_CGROUP" ]; then
        echo $$ 2>/dev/null > "$CGROUP_FROM/cgroup.procs"
        for _ in $(seq 1 50); do rmdir "$SCRUN_PY_TEST_CGROUP" 2>/dev/null && break; sleep 0.1; done
    fi
    echo "[test] wall time: $(( $(date +%s) - start )) s" >&2
    exit "$rc"
}

rc=0
start=$(date +%s)
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# the run's cgroup: a child of test.sh's own cgroup v2 (its limits stay), where writable
for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    [ "$(stat -fc %T "$root" 2>/dev/null)" = cgroup2fs ] || continue
    from=$root$(sed -n 's/^0:://p' /proc/self/cgroup)
    from=${from%/}
    if mkdir "$from/scrun-py-test-$$" 2>/dev/null &&
       echo $$ 2>/dev/null > "$from/scrun-py-test-$$/cgroup.procs"; then
        CGROUP_FROM=$from
        SCRUN_PY_TEST_CGROUP=$from/scrun-py-test-$$
    else
        rmdir "$from/scrun-py-test-$$" 2>/dev/null || true
    fi
    break
done
export SCRUN_PY_TEST_CGROUP

# the sdist and the wheel, built from the checkout and checked before any test
"$REPO/scripts/build.sh" >/dev/null || { echo "[test] scripts/build.sh failed" >&2; exit 1; }

if [ -n "$ONLY" ]; then
    run_on "$ONLY" "$@" || rc=$?
    run_multinode_on "$ONLY" "$@" || rc=$?
    exit $rc
fi
mapfile -t RELEASES < <("$REPO/scripts/cluster.sh" releases --testable)
# Build the other releases in the background, at the lowest priority, while the packaged
# release's tests run (they mostly wait on Slurm): each release's "cluster.sh up" then
# waits for its build (slurm-build.sh holds one lock per release) instead of starting it.
# The first release to be tested after the packaged one is built first.
if [ "${SCRUN_PREBUILD:-1}" = 1 ] && [ ${#RELEASES[@]} -gt 1 ]; then
    order=()
    for rel in "${RELEASES[@]:1}"; do is_full "$rel" && order+=("$rel"); done
    for rel in "${RELEASES[@]:1}"; do is_full "$rel" || order+=("$rel"); done
    mkdir -p /var/tmp/scrun-py-test
    # in a session of its own, so that the clean-up ends its whole process group
    setsid bash -c 'for rel in "${@:2}"; do
        nice -n 19 "$1/scripts/slurm-build.sh" "$rel" || echo "[test] background build of $rel failed" >&2
    done' prebuild "$REPO" "${order[@]}" >/var/tmp/scrun-py-test/prebuild.log 2>&1 &
    PREBUILD=$!
    echo "[test] building ${order[*]} in the background (log: /var/tmp/scrun-py-test/prebuild.log)" >&2
fi
run_on "${RELEASES[0]}" "$@" || rc=$?
run_podman_systest_on "${RELEASES[0]}" || rc=$?
run_multinode_on "${RELEASES[0]}" "$@" || rc=$?
down_release "${RELEASES[0]}"
# the whole-suite releases first: a failure there matters most
for rel in "${RELEASES[@]:1}"; do
    is_full "$rel" || continue
    run_on "$rel" "$@" || rc=$?
    run_multinode_on "$rel" "$@" || rc=$?
    down_release "$rel"
done
for rel in "${RELEASES[@]:1}"; do
    is_full "$rel" && continue
    mapfile -t suite < <(release_suite "$rel")
    run_on "$rel" "$@" "${suite[@]}" || rc=$?
    run_podman_systest_on "$rel" || rc=$?
    run_multinode_on "$rel" "$@" || rc=$?
    down_release "$rel"
done
exit $rc
