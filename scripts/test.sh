#!/bin/bash
# The whole test suite against real services: brings the local cluster up (idempotent),
# then runs unit, component and end-to-end tests (as root and as an ordinary user) plus
# ruff and mypy.  Run as root on Debian 12/13:   sudo scripts/test.sh [pytest args]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
"$REPO/scripts/cluster.sh" up
eval "$("$REPO/scripts/cluster.sh" env | sed 's/^/export /')"
cd "$REPO"
# under CI=true a skipped end-to-end test is a failure (tests/e2e/conftest.py)
exec timeout "${SCRUN_TEST_TIMEOUT:-4800}" "$SCRUN_TEST_VENV/bin/python" -m pytest -p no:cacheprovider "$@"
