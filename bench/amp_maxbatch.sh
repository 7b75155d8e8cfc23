#!/bin/sh
# The largest batch of ResNet-50 (ImageNet stem, 10 classes) at 224x224
# whose training step fits in a memory budget (default 16 GiB of peak
# RSS): classic at amp_level O0 and O2, and PyTorch (Debian python3-torch,
# bench/torch_bench.py) in f32.
#
# For each side the peak RSS of one process doing a warm-up step and a
# timed step is taken at two batch sizes (LO, HI); the line through them
# predicts the batch that reaches the budget, and that batch is then run
# for real.  If its RSS is over the budget the batch is cut by 5% and run
# again (at most 4 times), so the reported batch is one that was measured
# under the budget, not an extrapolation.
#
# Usage: bench/amp_maxbatch.sh [build-dir]
#   BUDGET_MB=16384, LO=16, HI=48, THREADS=2, SIDES="O0 O2 torch"
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
CLASSIC=$BUILD/classic
BUDGET_MB=${BUDGET_MB:-16384}
LO=${LO:-16}
HI=${HI:-48}
THREADS=${THREADS:-2}
SIDES=${SIDES:-"O0 O2 torch"}
PY=${PY:-/usr/bin/python3}

[ -x "$CLASSIC" ] || { echo "amp_maxbatch: no $CLASSIC (build first)" >&2; exit 1; }

# Peak RSS in MB of one training process of side $1 at batch $2.
rss_of() {
    if [ "$1" = torch ]; then
        OMP_NUM_THREADS=$THREADS "$PY" "$ROOT/bench/torch_bench.py" \
            --arch resnet50 --classes 10 --size 224 --batch "$2" \
            --threads "$THREADS" --steps 1 --warmup 1 --mode train |
            sed -n 's/.*rss_mb=\([0-9.]*\).*/\1/p'
    else
        "$CLASSIC" bench --arch resnet50 --stem imagenet --classes 10 \
            --size 224 --batch "$2" --threads "$THREADS" --steps 1 \
            --warmup 1 --mode train --amp "$1" |
            sed -n 's/^bench: mode=train.*rss_mb=\([0-9.]*\).*/\1/p'
    fi
}

echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB," \
    "budget $BUDGET_MB MB peak RSS, $(uptime | sed 's/.*load/load/')"
ROWS=""
for s in $SIDES; do
    lo=$(rss_of "$s" "$LO")
    hi=$(rss_of "$s" "$HI")
    [ -n "$lo" ] && [ -n "$hi" ] || { echo "amp_maxbatch: $s: no rss" >&2; exit 1; }
    per=$(awk -v a="$lo" -v b="$hi" -v l="$LO" -v h="$HI" \
        'BEGIN { printf "%.2f", (b - a) / (h - l) }')
    n=$(awk -v a="$lo" -v p="$per" -v l="$LO" -v m="$BUDGET_MB" \
        'BEGIN { printf "%d", l + (m - a) / p }')
    echo "== $s: rss $lo MB at batch $LO, $hi MB at $HI ($per MB/image);" \
        "predicted $n" >&2
    tries=0
    while :; do
        r=$(rss_of "$s" "$n")
        echo "   batch $n: rss $r MB" >&2
        if awk -v r="$r" -v m="$BUDGET_MB" 'BEGIN { exit !(r <= m) }'; then
            break
        fi
        tries=$((tries + 1))
        [ "$tries" -lt 4 ] || { echo "amp_maxbatch: $s: no batch fits" >&2; exit 1; }
        n=$((n * 95 / 100))
    done
    ROWS="$ROWS$(printf '%-6s %9s %9s %9s %10s %9s' "$s" "$lo" "$hi" \
        "$per" "$n" "$r")
"
done
echo
printf '%-6s %9s %9s %9s %10s %9s\n' side "RSS@$LO" "RSS@$HI" "MB/img" \
    "max batch" "its RSS"
printf "%s" "$ROWS"
echo "(RSS in MB: peak of one process, warm-up + one training step;"
echo " max batch: predicted from the two points, then run and measured)"
