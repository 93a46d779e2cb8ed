#!/bin/bash
# The whole test suite against real services, on every Slurm release the project tests.
# Run as root on Debian 12/13:
#
#   scripts/test.sh [pytest args]             the full suite (unit, end-to-end as root and as
#                                             an ordinary user, ruff, mypy) on the machine's
#                                             packaged Slurm and on the release scrun-py
#                                             implements (FULL_SUITE_RELEASES); then, on
#                                             every other release of scripts/releases.conf,
#                                             the release suite below
#   scripts/test.sh --slurm R [pytest args]   the full suite on release R only
#
# Each release's cluster is brought up first (idempotent; a release that is not packaged is
# built once into /opt/slurm/R, about 6 minutes).  A release built from an upstream tarball
# takes it from $SCRUN_SLURM_MIRROR (a directory of downloads) when it is there.  On every
# release, the multi-node tests (tests/e2e/test_multinode.py) then run against that
# release's 3-node cluster
# (scripts/cluster.sh up --slurm R --nodes 3), with the pytest args that are not paths.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
ONLY=""
if [ "${1:-}" = --slurm ]; then ONLY=${2:?--slurm needs a release}; shift 2; fi
# the end-to-end tests run on every release besides the packaged one: lifecycle, engines,
# hooks, faults, SPANK, the comparison with Slurm's own scrun, and the backend contract
# (on a release with pyslurm, scripts/pyslurm.sh: the whole suite on the pyslurm backend)
RELEASE_SUITE=(tests/e2e/test_lifecycle.py tests/e2e/test_engines.py tests/e2e/test_hooks.py
               tests/e2e/test_faults.py tests/e2e/test_spank.py tests/e2e/test_versus_scrun.py
               tests/e2e/test_release.py tests/e2e/test_backend_contract.py
               tests/e2e/test_backend_choice.py)

MULTINODE=tests/e2e/test_multinode.py
# the releases that get the whole suite besides the packaged one: the release whose scrun(1)
# scrun-py implements
read -r -a FULL_SUITE_RELEASES <<<"${SCRUN_FULL_SUITE_RELEASES:-26.05}"
is_full() { local r; for r in "${FULL_SUITE_RELEASES[@]}"; do [ "$r" = "$1" ] && return 0; done; return 1; }

run_on() {  # RELEASE [pytest args...]: the one-node cluster, without the multi-node tests
    local rel=$1; shift
    "$REPO/scripts/cluster.sh" up --slurm "$rel"
    (
        eval "$("$REPO/scripts/cluster.sh" env --slurm "$rel" | sed 's/^/export /')"
        # a release with pyslurm runs on the pyslurm backend: forced, so that a pyslurm
        # that cannot be used fails every create instead of passing on the CLI
        if [ "$SCRUN_TEST_PYSLURM" = 1 ]; then export SCRUN_PY_SLURM_BACKEND=pyslurm; fi
        echo "[test] Slurm $rel (backend ${SCRUN_PY_SLURM_BACKEND:-auto}): pytest $*" >&2
        # under CI=true a skipped end-to-end test is a failure (tests/e2e/conftest.py)
        timeout "${SCRUN_TEST_TIMEOUT:-4800}" "$SCRUN_TEST_VENV/bin/python" -m pytest \
            -p no:cacheprovider --ignore="$MULTINODE" "$@"
    )
}

run_multinode_on() {  # RELEASE [pytest args...]: the release's 3-node cluster
    local rel=$1 a opts=(); shift
    # the pytest args but the test paths (they name one-node tests)
    for a in "$@"; do [ -e "${a%%::*}" ] || opts+=("$a"); done
    "$REPO/scripts/cluster.sh" up --slurm "$rel" --nodes 3
    (
        eval "$("$REPO/scripts/cluster.sh" env --slurm "$rel" --nodes 3 | sed 's/^/export /')"
        echo "[test] Slurm $rel, 3 nodes: pytest ${opts[*]} $MULTINODE" >&2
        timeout "${SCRUN_TEST_TIMEOUT:-4800}" "$SCRUN_TEST_VENV/bin/python" -m pytest \
            -p no:cacheprovider "${opts[@]}" "$MULTINODE"
    )
}

rc=0
start=$(date +%s)
trap 'echo "[test] wall time: $(( $(date +%s) - start )) s" >&2' EXIT
if [ -n "$ONLY" ]; then
    run_on "$ONLY" "$@" || rc=$?
    run_multinode_on "$ONLY" "$@" || rc=$?
    exit $rc
fi
mapfile -t RELEASES < <("$REPO/scripts/cluster.sh" releases)
# Build the other releases in the background, at the lowest priority, while the packaged
# release's tests run (they mostly wait on Slurm): each release's "cluster.sh up" then
# waits for its build (slurm-build.sh holds one lock per release) instead of starting it.
# The first release to be tested after the packaged one is built first.
if [ "${SCRUN_PREBUILD:-1}" = 1 ] && [ ${#RELEASES[@]} -gt 1 ]; then
    order=()
    for rel in "${RELEASES[@]:1}"; do is_full "$rel" && order+=("$rel"); done
    for rel in "${RELEASES[@]:1}"; do is_full "$rel" || order+=("$rel"); done
    mkdir -p /var/tmp/scrun-py-test
    (for rel in "${order[@]}"; do
        nice -n 19 "$REPO/scripts/slurm-build.sh" "$rel" || echo "[test] background build of $rel failed" >&2
     done) >/var/tmp/scrun-py-test/prebuild.log 2>&1 &
    echo "[test] building ${order[*]} in the background (log: /var/tmp/scrun-py-test/prebuild.log)" >&2
fi
run_on "${RELEASES[0]}" "$@" || rc=$?
run_multinode_on "${RELEASES[0]}" "$@" || rc=$?
# the whole-suite releases first: a failure there matters most
for rel in "${RELEASES[@]:1}"; do
    is_full "$rel" || continue
    run_on "$rel" "$@" || rc=$?
    run_multinode_on "$rel" "$@" || rc=$?
done
for rel in "${RELEASES[@]:1}"; do
    is_full "$rel" && continue
    run_on "$rel" "$@" "${RELEASE_SUITE[@]}" || rc=$?
    run_multinode_on "$rel" "$@" || rc=$?
done
exit $rc
