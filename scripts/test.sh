#!/bin/bash
# The whole test suite against real services, on every Slurm release the project tests.
# Run as root on Debian 12/13:
#
#   scripts/test.sh [pytest args]             the full suite (unit, end-to-end as root and as
#                                             an ordinary user, ruff, mypy) on the machine's
#                                             packaged Slurm; then, on every other release of
#                                             scripts/releases.conf, the release suite below
#   scripts/test.sh --slurm R [pytest args]   the full suite on release R only
#
# Each release's cluster is brought up first (idempotent; a release that is not packaged is
# built once into /opt/slurm/R, about 5 minutes).  On every release, the multi-node tests
# (tests/e2e/test_multinode.py) then run against that release's 3-node cluster
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
if [ -n "$ONLY" ]; then
    run_on "$ONLY" "$@" || rc=$?
    run_multinode_on "$ONLY" "$@" || rc=$?
    exit $rc
fi
mapfile -t RELEASES < <("$REPO/scripts/cluster.sh" releases)
run_on "${RELEASES[0]}" "$@" || rc=$?
run_multinode_on "${RELEASES[0]}" "$@" || rc=$?
for rel in "${RELEASES[@]:1}"; do
    run_on "$rel" "$@" "${RELEASE_SUITE[@]}" || rc=$?
    run_multinode_on "$rel" "$@" || rc=$?
done
exit $rc
