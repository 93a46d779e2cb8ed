#!/bin/bash
# The OCI runtime-tools validation tests, against runc and against scrun-py, side by side.
# Run as root on the local cluster (scripts/cluster.sh up):
#
#   scripts/runtime-tools.sh [--node-shim] CHECKOUT
#
# CHECKOUT is a checkout of the opencontainers runtime-tools repository in which
# `runtimetest` and `validation/<name>/<name>.t` of the tests below are already built (this
# script fetches and builds nothing; the suite is not part of scrun-py).  Each test runs
# from CHECKOUT, as the suite expects, once with RUNTIME=runc and once with RUNTIME=a
# wrapper that runs scrun-py with its own --root, --log and the cluster's SLURM_CONF.
# The table gives each case's result for both, then the totals.
#
# --node-shim adds a third column: scrun-py with a stage_in script that gives the compute
# node a bundle it can run (see docs/differences.md, "OCI runtime-tools validation"): a
# bundle dir (under the work dir, not in the 0700 spool dir) whose rootfs/ is a symlink to
# the real rootfs, and whose config.json says ociVersion 1.0.2; with a user namespace
# (linux.uidMappings) it also makes the real rootfs searchable by others, since the node's
# crun sets up the rootfs as the container's root, an unprivileged host uid.  It shows what scrun-py itself does once the node's
# Slurm and runtime can run the suite's bundles; it is a diagnosis aid, not a setting.
#
# Environment: SCRUN_TEST_VENV (scrun-py's venv, default /opt/scrun-py/venv), SLURM_CONF
# (default: scripts/cluster.sh env), RUNC (default runc), TESTS (default the nine below),
# RT_TIMEOUT (seconds per test executable, default 600), RT_KEEP=1 keeps the TAP files
# (and each runtime's --log, the first place to look for why a case failed).  The
# container's stderr is not among them: the suite writes `create`'s stderr to a file in
# the bundle and deletes it with the bundle.  "ok N # SKIP" lines count as passed.
# Other tests of the suite run the same way once built, e.g.
#   TESTS="linux_uid_mappings hooks_stdin" scripts/runtime-tools.sh --node-shim CHECKOUT
# (docs/differences.md, "linux_uid_mappings and hooks_stdin").
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHIM=0
if [ "${1:-}" = --node-shim ]; then SHIM=1; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [--node-shim] RUNTIME-TOOLS-CHECKOUT" >&2; exit 2; }
CHECKOUT=$(cd "$1" && pwd)
TESTS=${TESTS:-"create start state kill kill_no_effect killsig delete pidfile misc_props"}
RUNC=${RUNC:-runc}
TIMEOUT=${RT_TIMEOUT:-600}

die() { echo "runtime-tools: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the suite's bundles and runc need it)"
for exe in runtimetest $(for t in $TESTS; do echo "validation/$t/$t.t"; done); do
    [ -x "$CHECKOUT/$exe" ] || die "$CHECKOUT/$exe missing: build runtimetest and the \
validation executables in the checkout first"
done
[ -f "$CHECKOUT/rootfs-amd64.tar.gz" ] || die "$CHECKOUT is not a runtime-tools checkout"
command -v "$RUNC" >/dev/null || die "$RUNC not found"
if [ -z "${SLURM_CONF:-}" ] || [ -z "${SCRUN_TEST_VENV:-}" ]; then
    eval "$("$REPO/scripts/cluster.sh" env | sed 's/^/export /')"
fi
SCRUN="$SCRUN_TEST_VENV/bin/scrun-py"
[ -x "$SCRUN" ] || die "$SCRUN missing: run scripts/cluster.sh up"

WORK=$(mktemp -d /tmp/scrun-py-runtime-tools.XXXXXX)
chmod 755 "$WORK"
cleanup() {
    for root in "$WORK"/root-*; do
        [ -d "$root" ] || continue
        for c in "$root"/*/; do
            [ -d "$c" ] || continue
            SLURM_CONF=$SLURM_CONF "$SCRUN" --root "$root" delete --force \
                "$(basename "$c")" >/dev/null 2>&1 || true
        done
    done
    if [ "${RT_KEEP:-0}" = 1 ]; then echo "TAP files kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

wrapper() {  # NAME [LUA]: a runc-argv wrapper around scrun-py
    local name=$1 lua=${2:-}
    mkdir -p "$WORK/root-$name"
    {
        echo '#!/bin/sh'
        echo "export SLURM_CONF='$SLURM_CONF'"
        echo "export PATH='$SCRUN_TEST_VENV/bin:$PATH'"
        if [ -n "$lua" ]; then echo "export SCRUN_PY_LUA='$lua'"; else echo "unset SCRUN_PY_LUA"; fi
        echo "exec '$SCRUN' --root '$WORK/root-$name' --log '$WORK/$name.log' \
--log-format json \"\$@\""
    } > "$WORK/$name"
    chmod 755 "$WORK/$name"
    echo "$WORK/$name"
}

write_shim() {
    cat > "$WORK/node-shim.lua" <<'EOF'
-- a node bundle: rootfs/ -> the real rootfs, ociVersion 1.0.2
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  local fh = assert(io.open(config_file, "r"))
  local cfg = slurm.from_json(fh:read("a"))
  fh:close()
  if type(cfg.ociVersion) == "string" and cfg.ociVersion:match("^1%.") then
    cfg.ociVersion = "1.0.2"
  end
  local root = cfg.root.path
  if root:sub(1, 1) ~= "/" then root = bundle .. "/" .. root end
  if type(cfg.linux) == "table" and type(cfg.linux.uidMappings) == "table"
     and #cfg.linux.uidMappings > 0 then
    -- with a user namespace the node's crun opens the rootfs as the container's root,
    -- an unprivileged host id: the suite's bundle dir is 0700 (so is the spool dir)
    assert(os.execute("chmod o+x '" .. root .. "'"))
  end
  local dir = "@NODE_BUNDLES@/" .. id
  assert(os.execute("mkdir -p '" .. dir .. "' && ln -sfn '" .. root .. "' '" .. dir
                    .. "/rootfs'"))
  cfg.root.path = "rootfs"
  fh = assert(io.open(dir .. "/config.json", "w"))
  fh:write(slurm.to_json(cfg))
  fh:close()
  slurm.set_bundle_path(dir)
  return 0
end
function slurm_scrun_stage_out() return 0 end
EOF
    mkdir -p "$WORK/node-bundles"
    chmod 755 "$WORK/node-bundles"
    sed -i "s|@NODE_BUNDLES@|$WORK/node-bundles|" "$WORK/node-shim.lua"
    echo "$WORK/node-shim.lua"
}

COLUMNS_=(runc scrun-py)
RUNTIMES=("$(command -v "$RUNC")" "$(wrapper scrun-py)")
if [ "$SHIM" = 1 ]; then
    COLUMNS_+=(shim)
    RUNTIMES+=("$(wrapper shim "$(write_shim)")")
fi

run_suite() {  # COLUMN RUNTIME: one TAP file per test
    local col=$1 runtime=$2 t
    for t in $TESTS; do
        echo "[runtime-tools] $col: $t" >&2
        (cd "$CHECKOUT" && RUNTIME=$runtime timeout "$TIMEOUT" "validation/$t/$t.t") \
            > "$WORK/$col.$t.tap" 2> "$WORK/$col.$t.err" || true
    done
}

for i in "${!COLUMNS_[@]}"; do run_suite "${COLUMNS_[$i]}" "${RUNTIMES[$i]}"; done

# one row per case: test, number, a pass/FAIL column per runtime, the case's text (runc's)
"$SCRUN_TEST_VENV/bin/python" - "$WORK" "$TESTS" "${COLUMNS_[@]}" <<'EOF'
import re
import sys
from pathlib import Path

work, tests, columns = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3:]
line = re.compile(r"^(not ok|ok) (\d+)(?: - (.*)| (# SKIP.*))?$")
results: dict[str, dict[tuple[str, int], bool]] = {c: {} for c in columns}
texts: dict[tuple[str, int], str] = {}
for col in columns:
    for test in tests:
        tap = work / f"{col}.{test}.tap"
        for raw in tap.read_text(errors="replace").splitlines() if tap.exists() else []:
            m = line.match(raw)
            if m:
                key = (test, int(m.group(2)))
                results[col][key] = m.group(1) == "ok"
                texts.setdefault(key, m.group(3) or m.group(4) or "")
keys = sorted({k for r in results.values() for k in r},
              key=lambda k: (tests.index(k[0]), k[1]))
head = f"{'test':<15}{'#':>3}  " + "".join(f"{c:<10}" for c in columns) + "case"
print(head)
print("-" * len(head))
for key in keys:
    cells = "".join(f"{('pass' if results[c][key] else 'FAIL') if key in results[c] else '-':<10}"
                    for c in columns)
    print(f"{key[0]:<15}{key[1]:>3}  {cells}{texts[key][:90]}")
print("-" * len(head))
totals = "".join(f"{f'{sum(results[c].values())}/{len(keys)}':<10}" for c in columns)
print(f"{'passed':<18}  {totals}")
EOF
