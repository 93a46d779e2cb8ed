#!/bin/bash
# Install the Debian packages of the list that are not installed yet (one apt run, or none).
#   scripts/apt-install.sh WHO PACKAGE...     WHO names the caller in the log line
# Another apt or dpkg that holds the lock (unattended-upgrades on a fresh machine, a second
# script of ours) is waited for, up to SCRUN_APT_LOCK_WAIT seconds (default 900), instead
# of failing: our own callers queue on one flock, anyone else's through apt's lock timeout.
set -euo pipefail
who=${1:?usage: $0 WHO PACKAGE...}; shift
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
wait_s=${SCRUN_APT_LOCK_WAIT:-900}
exec 9>/var/lock/scrun-py-apt.lock
flock -w "$wait_s" 9 || { echo "[$who] another scrun-py apt run held its lock for ${wait_s}s" >&2; exit 1; }
# re-check under the lock: a caller we waited for may have installed them
still=()
for p in "${missing[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || still+=("$p")
done
[ ${#still[@]} -gt 0 ] || exit 0
printf '[%s] installing: %s\n' "$who" "${still[*]}" >&2
LOCK=(-o "DPkg::Lock::Timeout=$wait_s")
# apt-get update takes the lists lock, which DPkg::Lock::Timeout does not cover: retry it
for try in $(seq 1 $((wait_s / 10 + 1))); do
    apt-get "${LOCK[@]}" update -q >/dev/null 2>"/tmp/scrun-py-apt-update.$$" && break
    if ! grep -qi 'lock' "/tmp/scrun-py-apt-update.$$" || [ "$try" -gt $((wait_s / 10)) ]; then
        cat "/tmp/scrun-py-apt-update.$$" >&2; rm -f "/tmp/scrun-py-apt-update.$$"; exit 1
    fi
    [ "$try" = 1 ] && echo "[$who] apt's lists are locked by another apt run: waiting" >&2
    sleep 10
done
rm -f "/tmp/scrun-py-apt-update.$$"
DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get "${LOCK[@]}" install -y -q "${still[@]}" >/dev/null
