#!/bin/bash
# Install the Debian packages of the list that are not installed yet (one apt run, or none).
#   scripts/apt-install.sh WHO PACKAGE...     WHO names the caller in the log line
set -euo pipefail
who=${1:?usage: $0 WHO PACKAGE...}; shift
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
printf '[%s] installing: %s\n' "$who" "${missing[*]}" >&2
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
