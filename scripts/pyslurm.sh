#!/bin/bash
# pyslurm (scrun-py's `pyslurm` extra) for a test cluster's virtualenv.  pyslurm X.Y.* is
# built from source against Slurm X.Y's headers and libslurm, and only X.Y: the releases
# below have one, every other release gets none (its suite runs on the CLI backend).
#
#   scripts/pyslurm.sh for RELEASE
#       print the pyslurm version for RELEASE (nothing when it has none)
#   scripts/pyslurm.sh install RELEASE PREFIX VENV SLURM_CONF
#       build and install it into VENV against the Slurm in PREFIX (a build of
#       scripts/slurm-build.sh), then check that it imports with SLURM_CONF.  Cached: a
#       stamp in VENV names the pyslurm and the Slurm build it was built against (a new
#       build takes about 4 minutes on 2 cores).  SCRUN_TEST_PYSLURM=0 skips it.
set -euo pipefail
log() { printf '[pyslurm] %s\n' "$*" >&2; }

pyslurm_for() {
    case "$1" in
        25.11) echo 25.11.2 ;;
    esac
}

case "${1:-}" in
    for) pyslurm_for "${2:?usage: $0 for RELEASE}"; exit 0 ;;
    install) ;;
    *) echo "usage: $0 for RELEASE | install RELEASE PREFIX VENV SLURM_CONF" >&2; exit 2 ;;
esac
REL=${2:?release}; PREFIX=${3:-}; VENV=${4:?venv}; CONF=${5:?slurm.conf}
VERSION=$(pyslurm_for "$REL")
[ -n "$VERSION" ] || exit 0
if [ "${SCRUN_TEST_PYSLURM:-1}" = 0 ]; then log "SCRUN_TEST_PYSLURM=0: not installed"; exit 0; fi
[ -n "$PREFIX" ] && [ -f "$PREFIX/include/slurm/slurm.h" ] ||
    { echo "pyslurm.sh: no Slurm $REL build with headers in '$PREFIX'" >&2; exit 1; }

STAMP_FILE=$VENV/.pyslurm-stamp
STAMP="pyslurm==$VERSION $PREFIX $(cat "$PREFIX/.complete" 2>/dev/null || echo unknown)"
imports() {
    SLURM_CONF=$CONF "$VENV/bin/python" -c \
        "import pyslurm, sys; sys.exit(pyslurm.__version__ != '$VERSION')" 2>/dev/null
}
if [ "$(cat "$STAMP_FILE" 2>/dev/null)" = "$STAMP" ] && imports; then
    exit 0
fi
log "building pyslurm $VERSION against Slurm $REL in $PREFIX (about 4 minutes)"
"$VENV/bin/pip" install -q Cython setuptools wheel packaging >/dev/null
SLURM_INCLUDE_DIR=$PREFIX/include SLURM_LIB_DIR=$PREFIX/lib \
    "$VENV/bin/pip" install -q --no-build-isolation --no-cache-dir --force-reinstall --no-deps \
    "pyslurm==$VERSION" >/dev/null
imports || { echo "pyslurm.sh: pyslurm $VERSION does not import with SLURM_CONF=$CONF" >&2; exit 1; }
echo "$STAMP" > "$STAMP_FILE"
log "pyslurm $VERSION installed in $VENV"
