#!/bin/bash
# The sdist and the wheel that sites install (pip install scrun-py), built and checked.
#
#   scripts/build.sh              build dist/scrun_py-V.tar.gz and dist/scrun_py-V-py3-none-any.whl
#                                 with `python -m build` (the wheel is built from the sdist),
#                                 then `twine check --strict` both
#   scripts/build.sh --if-stale   the same, unless dist/ already holds both, the wheel newer
#                                 than every file it is built from and built from the
#                                 checkout's commit (scripts/cluster.sh up, for the wheel)
#
# The wheel's path is the one line it prints on stdout; everything else goes to stderr.
# Built from a git checkout, both carry the commit as scrun_py/_commit.txt (setup.py), which
# `scrun-py --version` prints where there is no .git; the build fails if the wheel does not,
# or if either lacks an example site file of scrun_py/examples/ (`scrun-py example`).
# build and twine live in a virtualenv of their own, $SCRUN_BUILD_VENV (default .build-venv
# in the checkout), made on first use; the build's own dependencies (pyproject.toml's
# build-system) go into the isolated environment python -m build makes for each build.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
BUILD_VENV=${SCRUN_BUILD_VENV:-$REPO/.build-venv}
log() { printf '[build] %s\n' "$*" >&2; }

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' scrun_py/__init__.py)
[ -n "$version" ] || { echo "build.sh: no __version__ in scrun_py/__init__.py" >&2; exit 1; }
WHEEL=dist/scrun_py-$version-py3-none-any.whl
SDIST=dist/scrun_py-$version.tar.gz
# what the sdist and the wheel are made of (pyproject.toml and MANIFEST.in say)
SOURCES=(scrun_py bin lua docs pyproject.toml setup.py MANIFEST.in README.md LICENSE
         CHANGELOG.md oci.conf.example)

checkout_commit() {  # the commit version.py reports for this source tree
    /usr/bin/python3 -P -c 'import sys
sys.path.insert(0, sys.argv[1])
from scrun_py.base.version import git_commit
print(git_commit(sys.argv[1]))' "$REPO"
}

wheel_commit() {  # WHEEL: the commit it carries, or unknown
    /usr/bin/python3 -P -c 'import sys, zipfile
try:
    print(zipfile.ZipFile(sys.argv[1]).read("scrun_py/_commit.txt").decode().strip())
except (OSError, KeyError, zipfile.BadZipFile):
    print("unknown")' "$1"
}

if [ "${1:-}" = --if-stale ] && [ -f "$WHEEL" ] && [ -f "$SDIST" ] &&
   [ -z "$(find "${SOURCES[@]}" -type f -newer "$WHEEL" -not -name '*.pyc' -print -quit 2>/dev/null)" ] &&
   [ "$(wheel_commit "$WHEEL")" = "$(checkout_commit)" ]; then
    echo "$REPO/$WHEEL"
    exit 0
fi

if ! "$BUILD_VENV/bin/python" -c 'import build, twine' 2>/dev/null; then
    log "making the build virtualenv $BUILD_VENV (build, twine)"
    # Debian's python3, as scripts/cluster.sh's test virtualenv
    /usr/bin/python3 -m venv "$BUILD_VENV"
    "$BUILD_VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
    out=$("$BUILD_VENV/bin/pip" install -q build twine 2>&1) || {
        printf '%s\n' "$out" >&2
        echo "build.sh: cannot install build and twine into $BUILD_VENV" >&2
        exit 1
    }
fi

log "building the sdist and the wheel of scrun-py $version into dist/"
# only this project's artefacts go: dist/ then holds one sdist and one wheel to check
rm -f dist/scrun_py-*
out=$("$BUILD_VENV/bin/python" -m build --outdir dist . 2>&1) || {
    printf '%s\n' "$out" >&2
    echo "build.sh: python -m build failed" >&2
    exit 1
}
for f in "$SDIST" "$WHEEL"; do
    [ -f "$f" ] || { printf '%s\n' "$out" >&2; echo "build.sh: no $f" >&2; exit 1; }
done
"$BUILD_VENV/bin/python" -m twine check --strict "$SDIST" "$WHEEL" >&2
# the example site files `scrun-py example` prints: in the wheel and in the sdist, the
# checkout's bytes (scrun_py/examples/ links to oci.conf.example and lua/ in the checkout)
/usr/bin/python3 -P -c 'import os, sys, tarfile, zipfile
top, wheel, sdist = sys.argv[1:4]
base = os.path.basename(sdist)[:-len(".tar.gz")]
examples = os.path.join(top, "scrun_py", "examples")
names = sorted(os.listdir(examples))
with zipfile.ZipFile(wheel) as z, tarfile.open(sdist) as t:
    for name in names:
        with open(os.path.join(examples, name), "rb") as fh:
            want = fh.read()
        got = {}
        try:
            got["wheel"] = z.read(f"scrun_py/examples/{name}")
            member = t.extractfile(f"{base}/scrun_py/examples/{name}")
            got["sdist"] = member.read() if member else b""
        except KeyError:
            sys.exit(f"build.sh: scrun_py/examples/{name} is missing from the wheel or the sdist")
        for where, data in got.items():
            if data != want:
                sys.exit(f"build.sh: the {where} holds another scrun_py/examples/{name}")
print(" ".join(names))' "$REPO" "$WHEEL" "$SDIST" >/dev/null || exit 1
commit=$(checkout_commit)
if [ "$commit" != unknown ] && [ "$(wheel_commit "$WHEEL")" != "$commit" ]; then
    echo "build.sh: $WHEEL carries commit '$(wheel_commit "$WHEEL")', not the checkout's $commit" >&2
    exit 1
fi
log "built $SDIST and $WHEEL (commit $commit)"
echo "$REPO/$WHEEL"
