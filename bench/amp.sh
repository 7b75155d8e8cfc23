#!/bin/sh
# Mixed precision: ResNet-50 (ImageNet stem, 10 classes) training speed at
# amp_level O2 (and O1) against O0 at 32x32 batch 32 and 128 and at
# 224x224 batch 16, and peak RSS per level.
#
# Speed comes from amp_bench (built from bench/amp_bench.c next to
# classic): the levels' plans share one process and their training steps
# interleave, so each round's step-time ratio is measured under the same
# machine conditions; the median ratio over the rounds is reported, with
# its range.  Peak RSS comes from one short `classic bench --amp` process
# per level (memory does not depend on the load).
#
# Usage: bench/amp.sh [build-dir]
#   THREADS=2 (default), LEVELS ("0 2"; "0 1 2" adds O1), CONFIGS
#   ("train32x32b32 train32x32b128 train224b16"), QUICK=1 for 2 rounds.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
CLASSIC=$BUILD/classic
AMPB=$BUILD/amp_bench
THREADS=${THREADS:-2}
LEVELS=${LEVELS:-"0 2"}
CONFIGS=${CONFIGS:-"train32x32b32 train32x32b128 train224b16"}

for b in "$CLASSIC" "$AMPB"; do
    [ -x "$b" ] || { echo "amp: no $b (build first)" >&2; exit 1; }
done

field() {
    echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

echo "machine: $(nproc) cores, cpu isa $("$CLASSIC" check 2>/dev/null |
    sed -n 's/^cpu isa *//p'), $THREADS threads, $(uptime |
    sed 's/.*load/load/')"
ROWS=""
for c in $CONFIGS; do
    case $c in
    train32x32b32) size=32 batch=32 rounds=10 ;;
    train32x32b128) size=32 batch=128 rounds=5 ;;
    train224b16) size=224 batch=16 rounds=6 ;;
    *) echo "amp: unknown config $c" >&2; exit 1 ;;
    esac
    if [ "${QUICK:-0}" = 1 ]; then rounds=2; fi
    echo "== $c: amp_bench 50 $size $batch $rounds $LEVELS" >&2
    out=$(OMP_NUM_THREADS=$THREADS "$AMPB" 50 "$size" "$batch" "$rounds" \
        $LEVELS)
    echo "$out" >&2
    for l in $LEVELS; do
        line=$(echo "$out" | grep "^amp_bench: level=O$l ")
        rss=$("$CLASSIC" bench --arch resnet50 --stem imagenet --classes 10 \
            --batch "$batch" --size "$size" --threads "$THREADS" --steps 1 \
            --warmup 1 --mode train --amp "O$l" | grep '^bench: mode=train')
        row=$(awk -v c="$c" -v l="O$l" -v i="$(field img_s "$line")" \
            -v r="$(field ratio "$line")" -v lo="$(field ratio_lo "$line")" \
            -v hi="$(field ratio_hi "$line")" -v m="$(field rss_mb "$rss")" \
            'BEGIN { printf "%-15s %-4s %9.2f %7.2fx  %5.2f-%5.2f %9.0f",
                c, l, i, r, lo, hi, m }')
        ROWS="$ROWS$row
"
    done
done
echo
printf "%-15s %-4s %9s %8s  %11s %9s\n" config amp "img/s" "vs O0" range \
    "RSS MB"
printf "%s" "$ROWS"
echo "(img/s: median step of the interleaved run; vs O0: median per-round"
echo " step-time ratio and its range; RSS: one classic bench process each)"
echo "after: $(uptime | sed 's/.*load/load/')"
