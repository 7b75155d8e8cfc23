#!/usr/bin/env bash
# Fuzzes targets by hand: run.sh SECONDS [target...] (default: all,
# FUZZ_JOBS at a time).  New inputs go to $FUZZ_WORK/<target>/ (not the
# committed corpus); crashes to $FUZZ_WORK/crashes/; a summary line per target
# (executions, coverage, crashes) is printed at the end.
# BUILD (default build-fuzz) must hold a CL_FUZZ=ON tree; FUZZ_SEED and
# FUZZ_TIMEOUT (default 10 s per input) are passed to libFuzzer.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
secs="${1:-600}"
shift || true
build="${BUILD:-$root/build-fuzz}"
work="${FUZZ_WORK:-/tmp/classic-fuzz}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(idx cifar_bin cifar_tar jpeg png safetensors ckpt pth zip json yaml
           class_indexing gallery serve_infer serve_multipart serve_image
           quantized)
fi
mkdir -p "$work/crashes"
# libFuzzer runs one thread: FUZZ_JOBS targets (default 2) fuzz at once.
jobs_max="${FUZZ_JOBS:-2}"

fuzz_one() {
  local t="$1" bin="$build/fuzz_$1" log="$work/$1.log"
  mkdir -p "$work/$t"
  # rss/malloc limits: a hostile header must not make us allocate 2 GB.
  # FUZZ_TIMEOUT: seconds one input may take (on a machine busy with other
  # work, a nice 19 fuzzer can go 10 s without the CPU: raise it there).
  "$bin" -max_total_time="$secs" -seed="${FUZZ_SEED:-0}" \
    -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$work/crashes/$t-" "$work/$t" "$here/corpus/$t" \
    >"$log" 2>&1
  echo $? >"$work/$t.rc"
}

for t in "${targets[@]}"; do
  [ -x "$build/fuzz_$t" ] || { echo "run.sh: $build/fuzz_$t missing (make fuzz)"; exit 2; }
done
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
    wait -n || true
  done
  fuzz_one "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  log="$work/$t.log"
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo 99)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
          grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  crashes=$(ls "$work/crashes" 2>/dev/null | grep -c "^$t-" || true)
  echo "$t: ${secs}s rc=$rc execs=${execs:-?} ${cov:-cov: ?}" \
       "artifacts=$crashes log=$log"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
