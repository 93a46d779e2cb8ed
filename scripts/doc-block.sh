#!/bin/sh
# Print the fenced code block marked `title=NAME` from a Markdown document:
#
#   scripts/doc-block.sh docs/docker.md daemon.json
#
# A block starts with a line like ```json title=daemon.json and ends with ```.
# The engine setup (scripts/engines.sh) and the engine tests take their
# configuration from the docs this way, so the docs cannot drift.
# Exits 1 if the document has no such block (or more than one).
set -eu
[ $# -eq 2 ] || { echo "usage: $0 FILE.md TITLE" >&2; exit 2; }
awk -v title="$2" '
    inblock && /^```[[:space:]]*$/ { inblock = 0; next }
    inblock { print; next }
    /^```/ {
        for (i = 2; i <= NF; i++) if ($i == "title=" title) { inblock = 1; found++ }
    }
    END {
        if (found != 1) {
            printf "%s: expected one block titled %s, found %d\n", FILENAME, title, found > "/dev/stderr"
            exit 1
        }
    }
' "$1"
