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
# built once into /opt/slurm/R, about 5 minutes).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
ONLY=""
if [ "${1:-}" = --slurm ]; then ONLY=${2:?--slurm needs a release}; shift 2; fi
# the end-to-end tests run on every release besides the packaged one: lifecycle, engines,
# hooks, faults, SPANK, and the comparison with Slurm's own scrun
RELEASE_SUITE=(tests/e2e/test_lifecycle.py tests/e2e/test_engines.py tests/e2e/test_hooks.py
               tests/e2e/test_faults.py tests/e2e/test_spank.py tests/e2e/test_versus_scrun.py
               tests/e2e/test_release.py)

run_on() {  # RELEASE [pytest args...]
    local rel=$1; shift
    "$REPO/scripts/cluster.sh" up --slurm "$rel"
    (
        eval "$("$REPO/scripts/cluster.sh" env --slurm "$rel" | sed 's/^/export /')"
        echo "[test] Slurm $rel: pytest $*" >&2
        # under CI=true a skipped end-to-end test is a failure (tests/e2e/conftest.py)
        timeout "${SCRUN_TEST_TIMEOUT:-4800}" "$SCRUN_TEST_VENV/bin/python" -m pytest \
            -p no:cacheprovider "$@"
    )
}

if [ -n "$ONLY" ]; then
    run_on "$ONLY" "$@"
    exit
fi
mapfile -t RELEASES < <("$REPO/scripts/cluster.sh" releases)
rc=0
run_on "${RELEASES[0]}" "$@" || rc=$?
for rel in "${RELEASES[@]:1}"; do
    run_on "$rel" "$@" "${RELEASE_SUITE[@]}" || rc=$?
done
exit $rc
