#!/usr/bin/env bash
# CI fuzzing: builds the CL_FUZZ tree with clang (build-fuzz, or $BUILD) and
# fuzzes each target for N seconds (default 20) on its committed corpus,
# after replaying the corpus and the saved crash reproducers.  Exits non-zero
# on the first target that crashes, leaks or times out.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
secs="${1:-20}"
build="${BUILD:-$root/build-fuzz}"
CC=clang cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCL_FUZZ=ON >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target fuzz
ctest --test-dir "$build" -L fuzz --output-on-failure
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
BUILD="$build" FUZZ_WORK="$work" bash "$here/run.sh" "$secs" || {
  echo "ci.sh: a fuzz target failed; reproducers:"
  ls -l "$work/crashes"
  for f in "$work"/*.log; do grep -m1 -A12 'ERROR' "$f" || true; done
  exit 1
}
