#!/bin/sh
# Fails, naming the folders, if the folders under src/ include each other in
# a circle (a.h includes b/..., b/... includes a/...): the architecture
# must read one way (docs/architecture.md).  CI runs it.
set -eu
cd "$(dirname "$0")/../src"
pairs=$(for d in */; do
    d=${d%/}
    grep -rhoE '#include "[a-z_]+/' "$d" 2>/dev/null |
        sed 's/#include "//; s/\/$//' | sort -u |
        while read -r to; do
            [ "$to" = "$d" ] || echo "$d $to"
        done
done)
if ! out=$(printf '%s\n' "$pairs" | tsort 2>&1 >/dev/null) || [ -n "$out" ]; then
    echo "include cycle between src/ folders:" >&2
    printf '%s\n' "$out" | sed -n 's/^tsort: -: //p; s/^tsort: //p' >&2
    exit 1
fi
echo "src/ folders: no include cycle ($(printf '%s\n' "$pairs" | wc -l) folder dependencies)"
