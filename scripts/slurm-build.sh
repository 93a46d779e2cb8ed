#!/bin/bash
# Build a Slurm release (scripts/releases.conf) into /opt/slurm/<release>, including
# Slurm's own scrun, from one of two kinds of source:
#   debian   the orig tarball of Debian's source package (deb-src of the release's suite
#            through a private apt state; the system's apt sources are not changed);
#   tarball  SchedMD's release tarball, taken only from the mirror directory
#            $SCRUN_SLURM_MIRROR and checked against the sha256 of releases.conf.  Nothing
#            is downloaded: a release whose tarball is not there cannot be built here.
# Cached: nothing is done when the prefix already holds a complete build.
#
#   scripts/slurm-build.sh 24.11              build (or reuse) /opt/slurm/24.11
#   scripts/slurm-build.sh --prefix 24.11     print the prefix
#   scripts/slurm-build.sh --check 26.05      only fetch and verify the source (no build)
#   scripts/slurm-build.sh --available 26.05  exit 0 when the release's source can be had
#                                             here; otherwise print why, in one line, exit 1
#
# Needs root on Debian 12 or 13.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PREFIX_ROOT=${SCRUN_SLURM_PREFIX_ROOT:-/opt/slurm}
log() { printf '[slurm-build] %s\n' "$*" >&2; }

release_line() {
    awk -v r="$1" '$1 == r && $1 !~ /^#/ {print; found=1} END {exit !found}' "$REPO/scripts/releases.conf"
}

if [ "${1:-}" = --prefix ]; then echo "$PREFIX_ROOT/$2"; exit 0; fi
CHECK_ONLY=0
AVAILABLE_ONLY=0
if [ "${1:-}" = --check ]; then CHECK_ONLY=1; shift; fi
if [ "${1:-}" = --available ]; then AVAILABLE_ONLY=1; shift; fi
REL=${1:?usage: $0 [--prefix|--check] RELEASE}
LINE=$(release_line "$REL") || { echo "slurm-build: release $REL is not in scripts/releases.conf" >&2; exit 2; }
read -r _ KIND A B C <<<"$LINE"
case "$KIND" in
    debian)  SRCPKG=$A SRCVER=$B SUITE=$C; UPSTREAM=${SRCVER%%-*} ;;
    tarball) TARNAME=$A SHA=$B
             UPSTREAM=$(sed -n 's/^slurm-\([0-9][0-9.]*[0-9]\)\.tar\..*/\1/p' <<<"$TARNAME")
             [ -n "$UPSTREAM" ] && [ ${#SHA} = 64 ] && [ -z "$C" ] ||
                 { echo "slurm-build: releases.conf line of $REL: want 'tarball slurm-X.Y.Z.tar.xz SHA256'" >&2; exit 2; }
             SRCVER="$UPSTREAM sha256:$SHA" ;;
    *) echo "slurm-build: releases.conf line of $REL: unknown source kind '$KIND' (debian or tarball)" >&2; exit 2 ;;
esac
PREFIX=$PREFIX_ROOT/$REL

# the one line that says a release built from SchedMD's tarball cannot be tested here
missing_tarball() {
    [ "$KIND" = tarball ] || return 1
    [ -n "${SCRUN_SLURM_MIRROR:-}" ] && [ -f "$SCRUN_SLURM_MIRROR/$TARNAME" ] && return 1
    echo "Slurm $REL: not tested here: no $TARNAME in SCRUN_SLURM_MIRROR"
}
if [ "$AVAILABLE_ONLY" = 1 ]; then
    if missing_tarball; then exit 1; fi
    exit 0
fi

# one build of a release at a time: a second caller (scripts/test.sh builds the next releases
# in the background while the first one's tests run) waits for it, then finds it complete
if [ "$CHECK_ONLY" = 0 ]; then
    mkdir -p "$PREFIX_ROOT"
    exec 8>"$PREFIX_ROOT/.build-$REL.lock"
    flock 8
fi

# .complete holds the source version it was built from; scrun is part of a build from
# 23.02 on (22.05 has none, and looking for it rebuilt 22.05 at every cluster start)
has_scrun() { [ "$(printf '%s\n' "$UPSTREAM" 23.02 | sort -V | head -1)" = 23.02 ]; }
if [ "$CHECK_ONLY" = 0 ] && [ -x "$PREFIX/sbin/slurmctld" ] && [ "$(cat "$PREFIX/.complete" 2>/dev/null)" = "$SRCVER" ] &&
   { ! has_scrun || [ -x "$PREFIX/bin/scrun" ]; }; then
    log "Slurm $REL already built in $PREFIX"
    exit 0
fi

WORK=$(mktemp -d /var/tmp/slurm-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"

fetch_debian() {  # the orig tarball of Debian's source package, into $WORK/src
    # the Debian mirror this machine uses, from its own apt sources
    local uri apt
    uri=$(grep -hoE '^(URIs:|deb) +[a-z]+://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources \
            /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}' || true)
    uri=${uri:-http://deb.debian.org/debian}
    mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $SUITE main" \
        > "$WORK/apt/sources.list"
    apt=(-o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o "Dir::Etc::SourceParts=-"
         -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache=$WORK/apt/cache")
    log "fetching $SRCPKG $SRCVER ($SUITE) source"
    apt-get "${apt[@]}" update -q >/dev/null
    # only the orig tarball is needed (the Debian packaging files may not download here)
    (cd "$WORK/src" && apt-get "${apt[@]}" source --download-only "$SRCPKG=$SRCVER" >/dev/null 2>&1 || true)
    TARBALL=$(ls "$WORK/src/${SRCPKG}_${UPSTREAM}".orig.tar.* 2>/dev/null | head -1 || true)
    [ -n "$TARBALL" ] || { echo "slurm-build: could not download the orig tarball of $SRCPKG $SRCVER" >&2; exit 1; }
}

fetch_tarball() {  # the tarball from the mirror directory, checked against its sha256
    local got why
    if why=$(missing_tarball); then echo "slurm-build: $why" >&2; exit 1; fi
    TARBALL=$SCRUN_SLURM_MIRROR/$TARNAME
    log "using $TARNAME from the mirror directory"
    got=$(sha256sum "$TARBALL" | cut -d' ' -f1)
    if [ "$got" != "$SHA" ]; then
        echo "slurm-build: $TARBALL: sha256 $got differs from releases.conf's $SHA: refused" >&2
        exit 1
    fi
}

if [ "$KIND" = tarball ]; then fetch_tarball; else
    "$REPO/scripts/apt-install.sh" slurm-build debian-archive-keyring
    fetch_debian
fi
[ "$CHECK_ONLY" = 0 ] || { log "$TARBALL: source of Slurm $REL verified"; exit 0; }

BUILD_DEPS=(build-essential libmunge-dev libjson-c-dev liblua5.1-0-dev libyaml-dev libdbus-1-dev
            libhttp-parser-dev libjwt-dev libreadline-dev liblz4-dev zlib1g-dev pkg-config
            python3)
"$REPO/scripts/apt-install.sh" slurm-build "${BUILD_DEPS[@]}"
tar -xf "$TARBALL" -C "$WORK/src"
SRC=$(find "$WORK/src" -maxdepth 1 -mindepth 1 -type d -name 'slurm*' | head -1)

log "building Slurm $UPSTREAM into $PREFIX (about 5 minutes on 2 cores)"
rm -rf "$PREFIX"
cd "$SRC"
# gcc 14 (Debian 13) turns these old-C warnings into errors; an older release's code has them
CFLAGS="-O2 -g0 -Wno-error=implicit-function-declaration -Wno-error=incompatible-pointer-types -Wno-error=int-conversion" \
./configure --prefix="$PREFIX" --sysconfdir="$PREFIX/etc" --disable-debug --without-rpath \
    --with-munge --with-json --with-yaml --with-lua --without-hdf5 --without-ofed \
    --without-pmix --disable-slurmrestd > "$WORK/configure.log" 2>&1 ||
    { tail -20 "$WORK/configure.log" >&2; exit 1; }
make -j"$(nproc)" > "$WORK/make.log" 2>&1 || { tail -30 "$WORK/make.log" >&2; exit 1; }
make install > "$WORK/install.log" 2>&1 || { tail -30 "$WORK/install.log" >&2; exit 1; }
# the built client finds its libraries without rpath through the prefix's lib dir
echo "$PREFIX/lib" > "/etc/ld.so.conf.d/slurm-$REL.conf"; ldconfig
mkdir -p "$PREFIX/etc"
echo "$SRCVER" > "$PREFIX/.complete"
log "Slurm $REL built: $("$PREFIX/sbin/slurmd" -V)"
