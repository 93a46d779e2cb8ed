#!/bin/bash
# podman's own system tests (the bats files of test/system in the source of the INSTALLED
# podman's Debian package) for the runtime's part of podman, with crun and with scrun-py
# side by side on one stand-in test image.  Root only, on the one-node cluster of
# scripts/cluster.sh (up, with its engines) whose environment is exported
# (scripts/cluster.sh env); scripts/test.sh runs it on the packaged release.
#
#   scripts/podman-systest.sh [--files "030-run 040-ps ..."] [--runtimes "crun slurm"]
#
# - podman's source: `apt-get source` of the installed podman's source package and version
#   (deb-src of the machine's Debian mirrors, through a private apt state: the system's apt
#   sources are not changed), unpacked with its Debian patches; its test/system is cached
#   in $SCRUN_PODMAN_SYSTEST_CACHE (default /var/cache/scrun-py-test/podman-systest).
# - bats: Debian's package.
# - podman: rootful, with the engines' containers.conf (scripts/engines.sh: netns "none",
#   the runtime "slurm" = scrun-py with the cluster's slurm.conf and the staging script),
#   in a store of its own (--root, --runroot, --tmpdir, --network-config-dir under
#   $SCRUN_TEST_STATE/podman-systest; buildah is a wrapper with the same store): the
#   suite removes every container, pod, network and image but its own in that store, and
#   must not touch the machine's.  The suite calls $PODMAN, a wrapper that adds those
#   options and `--runtime crun` or `--runtime slurm`; the suite's containers.conf is the
#   engines' with podman's default rlimits lowered (below).
# - the image: tests/podman-systest/testimage.sh, imported as quay.io/libpod/testimage:TAG
#   (the tag of the release's helpers.bash); no registry is used.
#
# crun is the baseline: a test that fails with scrun-py is a failure only if it passes with
# crun.  So scrun-py runs every file first, and crun then runs only the files in which
# scrun-py failed a test that is not on the allow-list (none, on a good run);
# SCRUN_SYSTEST_CRUN=all runs crun on every file, before scrun-py, as well.
# SCRUN_SYSTEST_CRUN_RESULTS=DIR takes crun's TAP of a file from DIR when DIR has it
# (results/crun of an earlier run on this machine: crun's results depend on podman, crun
# and the image, not on Slurm) instead of running crun again: scripts/test.sh passes the
# first release's to the next.
#
# Each bats file runs with each runtime (TAP), under flock on $SCRUN_SYSTEST_LOCK when that
# is set (taken per file, so that others sharing the machine get turns between files).
# Printed: per runtime the counts (passed, failed, skipped) and every test that passes with
# crun and fails with scrun-py.  Such a test fails the run unless it is on
# tests/podman-systest/allow-list, whose entries name a Slurm design limit that
# docs/differences.md describes.  An entry whose test passes is reported (the list must not
# keep it).  At its end, and on SIGINT/SIGTERM, every container, pod, network and volume of
# the store is removed.
#
# Exit status: 0 all well; 1 a test not on the allow-list fails with scrun-py only, or the
# harness failed (a bats file that did not run to its end, a leftover); 2 usage.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
STATE=${SCRUN_TEST_STATE:-/var/lib/scrun-py-test}
CACHE=${SCRUN_PODMAN_SYSTEST_CACHE:-/var/cache/scrun-py-test/podman-systest}
WORK=$STATE/podman-systest
ALLOW=$REPO/tests/podman-systest/allow-list
FILES="030-run 040-ps 045-start 050-stop 055-rm 075-exec 080-pause 130-kill"
RUNTIMES="crun slurm"
REPORT=0
# a bats file that runs longer is stopped (and the run fails)
FILE_TIMEOUT=${SCRUN_SYSTEST_FILE_TIMEOUT:-900}
LOCK=${SCRUN_SYSTEST_LOCK:-}
CRUN_MODE=${SCRUN_SYSTEST_CRUN:-failed}

log() { printf '[podman-systest] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --files) FILES=${2:?--files needs a list}; shift 2 ;;
        --runtimes) RUNTIMES=${2:?--runtimes needs a list}; shift 2 ;;
        --report) REPORT=1; shift ;;
        *) echo "usage: $0 [--files \"030-run ...\"] [--runtimes \"crun slurm\"] [--report]" >&2; exit 2 ;;
    esac
done

# ---------------------------------------------------------------------------------------
# the files each runtime ran: crun's are set once scrun-py has run (run_crun_where_needed)
CRUN_FILES=$FILES
files_of() {  # RUNTIME
    if [ "$1" = crun ]; then echo "$CRUN_FILES"; else echo "$FILES"; fi
}

# the results: "FILE<TAB>STATUS<TAB>NAME" per test, STATUS ok, fail or skip
results() {  # RUNTIME
    local f
    for f in $(files_of "$1"); do
        awk -v f="$f.bats" '
            /^1\.\.[0-9]+$/ {plan = substr($0, 4)}
            /^(not )?ok [0-9]+ / {
                st = ($1 == "not") ? "fail" : "ok"
                line = $0
                sub(/^(not )?ok [0-9]+ /, "", line)
                if (line ~ / # [sS][kK][iI][pP]/) { st = "skip"; sub(/ # [sS][kK][iI][pP].*$/, "", line) }
                n++
                print f "\t" st "\t" line
            }
            END { if (plan == "" || n < plan) print f "\tfail\t(bats ran " n+0 " of " plan+0 " tests: see its TAP)" }
        ' "$WORK/results/$1/$f.tap" 2>/dev/null || echo "$f.bats	fail	(no TAP)"
    done
}

counts() {  # RUNTIME
    results "$1" | awk -F'\t' '{c[$2]++} END {printf "%d passed, %d failed, %d skipped", c["ok"], c["fail"], c["skip"]}'
}

allowed() {  # FILE NAME: the allow-list's reason for the test, if any
    awk -F' [|] ' -v f="$1" -v n="$2" '!/^#/ && NF >= 3 && $1 == f && $2 == n {print $3; exit}' "$ALLOW"
}

report() {  # the counts and the comparison of the TAP in $WORK/results; false on a failure
    local rc=0 rt f st name reason n_bad n_allowed crun
    for rt in $RUNTIMES; do
        if [ -z "$(files_of "$rt")" ]; then
            log "$rt: not run (scrun-py failed no test outside the allow-list)"
            continue
        fi
        log "$rt: $(counts "$rt") (files: $(files_of "$rt" | xargs))"
    done
    if [[ " $RUNTIMES " == *" crun "* && " $RUNTIMES " == *" slurm "* ]]; then
        local -A CRUN
        while IFS=$'\t' read -r f st name; do CRUN["$f	$name"]=$st; done < <(results crun)
        n_bad=0 n_allowed=0
        while IFS=$'\t' read -r f st name; do
            # a file crun did not run: its failures with scrun-py are all on the allow-list
            crun=${CRUN["$f	$name"]:-}
            [[ " $CRUN_FILES " == *" ${f%.bats} "* ]] || crun=ok
            if [ "$crun" = ok ] && [ "$st" = fail ]; then
                reason=$(allowed "$f" "$name")
                if [ -n "$reason" ]; then
                    log "allowed: $f: $name (fails with scrun-py: $reason)"
                    n_allowed=$((n_allowed + 1))
                else
                    log "FAILED: $f: $name (passes with crun, fails with scrun-py)"
                    n_bad=$((n_bad + 1))
                fi
            elif [ "${CRUN["$f	$name"]:-}" = ok ] && [ "$st" = skip ]; then
                log "note: $f: $name passes with crun, is skipped with scrun-py"
            elif [ "$st" = ok ] && [ -n "$(allowed "$f" "$name")" ]; then
                log "note: $f: $name is on the allow-list but passes with scrun-py"
            fi
        done < <(results slurm)
        log "scrun-py against crun: $n_bad failing only with scrun-py, $n_allowed allowed (tests/podman-systest/allow-list)"
        [ "$n_bad" = 0 ] || rc=1
    fi
    # a bats file that did not run to its end fails the run
    for rt in $RUNTIMES; do
        if results "$rt" | grep -q $'\t(bats ran'; then
            log "a bats file did not run to its end with $rt (TAP in $WORK/results/$rt)"
            rc=1
        fi
    done
    return "$rc"
}

case "$CRUN_MODE" in failed|all) ;; *) die "SCRUN_SYSTEST_CRUN must be failed or all, not $CRUN_MODE" ;; esac
if [ "$REPORT" = 1 ]; then
    CRUN_FILES=$(for f in $FILES; do [ ! -f "$WORK/results/crun/$f.tap" ] || echo "$f"; done | xargs)
    report; exit
fi
[ "$(id -u)" = 0 ] || die "run as root"
[ -n "${SLURM_CONF:-}" ] || die "no SLURM_CONF: export the cluster's environment (scripts/cluster.sh env)"
command -v podman >/dev/null || die "podman is not installed"

# ---------------------------------------------------------------------------------------
# podman's source: test/system of the installed podman's Debian source package
fetch_source() {  # prints the cached directory that holds test/system
    local pkg ver dir tmp codename apt
    read -r pkg ver < <(dpkg-query -W -f='${source:Package} ${source:Version}\n' podman)
    dir=$CACHE/${pkg}_$ver
    if [ "$(cat "$dir/.complete" 2>/dev/null)" = "$pkg $ver" ]; then echo "$dir"; return 0; fi
    log "fetching the source of $pkg $ver (test/system)"
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX")
    chmod 755 "$tmp"  # apt downloads as _apt
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" RETURN
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    # deb-src lines for the machine's Debian mirrors (one-line and deb822 sources)
    {
        grep -hE '^deb +(\[[^]]*\] +)?[a-z]+://[^ ]+/debian(-security)?/? ' \
            /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            sed -E 's/^deb +(\[[^]]*\] +)?/deb-src [signed-by=\/usr\/share\/keyrings\/debian-archive-keyring.gpg] /' || true
        awk '/^URIs:/ {u=$2} /^Suites:/ {s=""; for (i=2;i<=NF;i++) s=s" "$i}
             /^$/ {if (u ~ /\/debian(-security)?\/?$/) for (n=split(s,a," ");n>0;n--)
                   print "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] " u " " a[n] " main"; u=""}
             END {if (u ~ /\/debian(-security)?\/?$/) for (n=split(s,a," ");n>0;n--)
                   print "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] " u " " a[n] " main"}' \
            /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    } > "$tmp/sources.list"
    [ -s "$tmp/sources.list" ] || printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n' \
        "$codename" > "$tmp/sources.list"
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/src"
    apt=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=-"
         -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache")
    apt-get "${apt[@]}" update -q >/dev/null || die "apt-get update (deb-src) failed"
    (cd "$tmp/src" && apt-get "${apt[@]}" source -q --download-only "$pkg=$ver" >/dev/null 2>&1) ||
        die "apt-get source $pkg=$ver failed"
    dpkg-source --no-check -x "$tmp/src/${pkg}_${ver#*:}.dsc" "$tmp/src/tree" >/dev/null ||
        die "dpkg-source -x of $pkg $ver failed"
    [ -f "$tmp/src/tree/test/system/helpers.bash" ] || die "$pkg $ver has no test/system/helpers.bash"
    rm -rf "$dir"
    mkdir -p "$dir/test"
    cp -a "$tmp/src/tree/test/system" "$dir/test/system"
    echo "$pkg $ver" > "$dir/.complete"
    echo "$dir"
}

# dpkg-source unpacks podman's source; the stand-in image is made from busybox-static
"$REPO/scripts/apt-install.sh" podman-systest bats busybox-static dpkg-dev
SRC=$(fetch_source)
SYS=$SRC/test/system
for f in $FILES; do [ -f "$SYS/$f.bats" ] || die "$SYS has no $f.bats"; done

TAG=$(sed -n 's/^PODMAN_TEST_IMAGE_TAG=.*:-"\([0-9]*\)".*/\1/p' "$SYS/helpers.bash")
[ -n "$TAG" ] || die "no PODMAN_TEST_IMAGE_TAG in $SYS/helpers.bash"
FQN=quay.io/libpod/testimage:$TAG

# the engines' containers.conf (netns "none", the runtime "slurm"), with podman's default
# limits for a rootful container (1048576 open files and processes) lowered to what podman's
# own process has (the hard limits; processes also at most kernel.pid_max, as podman lowers
# its own to that): a runtime that cannot raise them (no CAP_SYS_RESOURCE, as in a
# container) fails every container with crun ("setrlimit RLIMIT_NOFILE: Operation not
# permitted")
NOFILE=$(ulimit -Hn)
NPROC=$(ulimit -Hu)
PID_MAX=$(cat /proc/sys/kernel/pid_max)
if [ "$NPROC" = unlimited ] || [ "$NPROC" -gt "$PID_MAX" ]; then NPROC=$PID_MAX; fi
[ "$NOFILE" != unlimited ] || NOFILE=1048576
eval "$("$REPO/scripts/engines.sh" env | grep '^CONTAINERS_CONF=' | sed 's/^/ENGINES_/')"
[ -f "$ENGINES_CONTAINERS_CONF" ] || die "no $ENGINES_CONTAINERS_CONF: start the engines (scripts/engines.sh up)"
mkdir -p "$WORK/bin" "$WORK/results"
grep -q '^\[containers\]' "$ENGINES_CONTAINERS_CONF" || die "$ENGINES_CONTAINERS_CONF has no [containers] table"
sed "/^\[containers\]/a default_ulimits = [\"nofile=$NOFILE:$NOFILE\", \"nproc=$NPROC:$NPROC\"]" \
    "$ENGINES_CONTAINERS_CONF" > "$WORK/containers.conf"
export CONTAINERS_CONF=$WORK/containers.conf

# ---------------------------------------------------------------------------------------
# the store and the wrappers: `pull` of the test image loads the saved copy (the suite pulls
# it again when a test removed or untagged it; no registry is used)
STORE=(--root="$WORK/storage" --runroot="$WORK/run" --tmpdir="$WORK/tmp"
       --network-config-dir="$WORK/networks")
for rt in $RUNTIMES; do
    cat > "$WORK/bin/podman-$rt.new" <<EOF
#!/bin/sh
if [ \$# = 2 ] && [ "\$1" = pull ] && [ "\$2" = "$FQN" ]; then
    exec /usr/bin/podman ${STORE[*]} load -q -i "$WORK/testimage.tar"
fi
exec /usr/bin/podman ${STORE[*]} --runtime=$rt "\$@"
EOF
    chmod 755 "$WORK/bin/podman-$rt.new"
    mv "$WORK/bin/podman-$rt.new" "$WORK/bin/podman-$rt"
done
PODMAN_ANY=$WORK/bin/podman-${RUNTIMES%% *}
# buildah, which the suite runs beside podman (055-rm's external container), on the same
# store: first in the suite's PATH
cat > "$WORK/bin/buildah.new" <<EOF
#!/bin/sh
exec /usr/bin/buildah --root="$WORK/storage" --runroot="$WORK/run" "\$@"
EOF
chmod 755 "$WORK/bin/buildah.new"
mv "$WORK/bin/buildah.new" "$WORK/bin/buildah"

sweep() {  # every container, pod, network and volume of the store
    "$PODMAN_ANY" pod rm -t 0 --all --force --ignore >/dev/null 2>&1 || true
    "$PODMAN_ANY" rm -t 0 --all --force --ignore >/dev/null 2>&1 || true
    "$PODMAN_ANY" network prune --force >/dev/null 2>&1 || true
    "$PODMAN_ANY" volume prune --force >/dev/null 2>&1 || true
}

sweep_and_list() {  # sweeps, then prints what the store still has
    sweep
    local c p n
    c=$("$PODMAN_ANY" ps -a --external -q 2>/dev/null | wc -l)
    p=$("$PODMAN_ANY" pod ps -q 2>/dev/null | wc -l)
    n=$("$PODMAN_ANY" network ls -q 2>/dev/null | grep -vcx podman || true)
    [ "$c$p$n" = 000 ] || echo "containers $c, pods $p, networks $n"
    # a conmon of the store that outlived its container
    grep -lszF -- "$WORK/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 |
        while read -r pid; do
            [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = conmon ] && echo "conmon $pid"
        done
    return 0
}

locked() {  # CMD...: under flock on $LOCK when it is set
    if [ -z "$LOCK" ]; then "$@"; return; fi
    local rc=0
    exec 7>>"$LOCK"
    flock 7
    # no child keeps the lock (conmon outlives podman): fd 7 is closed for them
    "$@" 7>&- || rc=$?
    flock -u 7
    exec 7>&-
    return "$rc"
}

BATS_PID=""
# shellcheck disable=SC2317  # the trap's
on_exit() {
    local rc=$?
    set +e
    trap - EXIT
    trap '' INT TERM
    if [ -n "$BATS_PID" ]; then
        kill -TERM -- -"$BATS_PID" 2>/dev/null
        wait "$BATS_PID" 2>/dev/null
    fi
    # not under the lock: this may run while the lock is held (an interrupted file)
    sweep
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

image() {  # the test image in the store, and its saved copy
    "$REPO/tests/podman-systest/testimage.sh" "$PODMAN_ANY" "$FQN" "$TAG"
    [ -s "$WORK/testimage.tar" ] && [ "$WORK/testimage.tar" -nt "$REPO/tests/podman-systest/testimage.sh" ] ||
        { rm -f "$WORK/testimage.tar"; "$PODMAN_ANY" save -q -o "$WORK/testimage.tar" "$FQN"; }
}

# ---------------------------------------------------------------------------------------
# the runs
run_file() {  # RUNTIME FILE: the bats file's TAP into results/RUNTIME/FILE.tap
    local rt=$1 f=$2 out=$WORK/results/$1/$2.tap t0 rc=0
    mkdir -p "$WORK/results/$rt"
    t0=$SECONDS
    sweep
    image
    # in a process group of its own (timeout), stdin closed, podman's TMPDIR in the work dir
    (cd "$SYS" && exec env PODMAN="$WORK/bin/podman-$rt" PATH="$WORK/bin:$PATH" \
        BATS_TMPDIR="$WORK/tmp-bats" TMPDIR="$WORK/tmp-bats" timeout -k 30 "$FILE_TIMEOUT" bats --tap "$f.bats") \
        </dev/null >"$out" 2>&1 &
    BATS_PID=$!
    wait "$BATS_PID" || rc=$?
    BATS_PID=""
    sweep
    log "$f.bats with $rt: $((SECONDS - t0)) s (bats exit $rc)"
    [ "$rc" != 124 ] || echo "not ok 0 $f.bats: stopped after ${FILE_TIMEOUT}s" >> "$out"
}

CRUN_FROM=${SCRUN_SYSTEST_CRUN_RESULTS:-}
run_crun() {  # FILE: crun's TAP of the file (taken from CRUN_FROM when it has it)
    if [ -n "$CRUN_FROM" ] && [ -f "$CRUN_FROM/$1.tap" ]; then
        mkdir -p "$WORK/results/crun"
        cp "$CRUN_FROM/$1.tap" "$WORK/results/crun/$1.tap"
        log "$1.bats with crun: the TAP of $CRUN_FROM"
        return 0
    fi
    run_file crun "$1"
}

needs_crun() {  # FILE: true if scrun-py failed a test of it that is not on the allow-list
    local f st name
    while IFS=$'\t' read -r f st name; do
        [ "$f" = "$1.bats" ] && [ "$st" = fail ] && [ -z "$(allowed "$f" "$name")" ] && return 0
    done < <(FILES=$1 results slurm)
    return 1
}

mkdir -p "$WORK/tmp-bats"
rm -rf "$WORK/results"
t_all=$SECONDS
has_crun=0 has_slurm=0
[[ " $RUNTIMES " != *" crun "* ]] || has_crun=1
[[ " $RUNTIMES " != *" slurm "* ]] || has_slurm=1
if [ "$has_crun" = 1 ] && { [ "$CRUN_MODE" = all ] || [ "$has_slurm" = 0 ]; }; then
    for f in $FILES; do locked run_crun "$f"; done
fi
if [ "$has_slurm" = 1 ]; then
    for f in $FILES; do locked run_file slurm "$f"; done
    if [ "$has_crun" = 1 ] && [ "$CRUN_MODE" = failed ]; then
        CRUN_FILES=""
        for f in $FILES; do
            needs_crun "$f" || continue
            CRUN_FILES="$CRUN_FILES${CRUN_FILES:+ }$f"
            locked run_crun "$f"
        done
    fi
fi
rc=0
report || rc=1
log "wall time of the bats runs: $((SECONDS - t_all)) s"

left=$(locked sweep_and_list)
if [ -n "$left" ]; then log "left behind: $left"; rc=1; fi
log "TAP of each file and runtime: $WORK/results"
exit "$rc"
