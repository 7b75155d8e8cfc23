#!/bin/sh
# The measurements behind docs/distributed.md's scaling model, run by hand
# as root (network namespaces):  bench/dist_scaling.sh [build-dir]
#
# 1. Gradient allreduce time against size (bench/allreduce_bench.c) on
#    shared memory (2 ranks, one host), over TCP between 2 and 4 namespace
#    hosts (tests/netns/hosts.sh: veth links to a bridge), and between 2
#    hosts whose links are limited to RATE (tc tbf, default 1gbit).
# 2. ResNet-50 training steps on 2 hosts, unlimited and at RATE, against 1
#    process: the step time the model predicts from (1) and the compute
#    time.
# Environment: RATE (default 1gbit), MAX_MB (largest message, default 64),
# STEPS (training steps, default 6), BATCH (per-rank batch, default 8).
set -eu

BUILD=${1:-build}
BIN=$BUILD/classic
AR=$BUILD/allreduce_bench
RATE=${RATE:-1gbit}
MAX_MB=${MAX_MB:-64}
STEPS=${STEPS:-6}
BATCH=${BATCH:-8}
HERE=$(cd "$(dirname "$0")/.." && pwd)
HOSTS="$HERE/tests/netns/hosts.sh"
OUT=$(mktemp -d /tmp/dist-scaling-XXXXXX)
trap 'sh "$HOSTS" down "$OUT/h" 2>/dev/null; rm -rf "$OUT"' EXIT
SHM="mpirun --oversubscribe --allow-run-as-root --bind-to none \
--mca btl self,vader --mca btl_vader_single_copy_mechanism none \
--mca plm_rsh_agent false"

[ -x "$AR" ] && [ -x "$BIN" ] || { echo "build $BUILD first" >&2; exit 1; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load:$(uptime | sed 's/.*load average://')"

echo "## allreduce, shared memory, 2 ranks"
$SHM -np 2 -x OMP_NUM_THREADS=1 "$AR" "$MAX_MB"
for n in 2 4; do
    sh "$HOSTS" up "$OUT/h" $n
    echo "## allreduce, TCP over veth, $n hosts"
    "$OUT/h/mpirun" -np $n -x OMP_NUM_THREADS=1 "$AR" "$MAX_MB"
    sh "$HOSTS" down "$OUT/h"
done
sh "$HOSTS" up "$OUT/h" 2
sh "$HOSTS" rate "$OUT/h" 0 "$RATE"
sh "$HOSTS" rate "$OUT/h" 1 "$RATE"
echo "## allreduce, TCP, 2 hosts at $RATE"
"$OUT/h/mpirun" -np 2 -x OMP_NUM_THREADS=1 "$AR" "$MAX_MB"

# Training: resnet50 at 32x32 (CIFAR stem), Fashion-MNIST, fixed lr.
common="--model resnet50 --stem cifar --image_size 32 --in_channels 1 \
--random_crop_padding 0 --hflip 0 --mean 0.286 --std 0.353 --seed 7 \
--scheduler constant --warmup_epochs 0 --lr 0.01 --val_interval 0 \
--ckpt_save_epochs 0 --per_print_times 1 --epoch_size 1 \
--num_parallel_workers 1 --batch_size $BATCH"
step_ms() {
    python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l][2:]
ms = sorted(r["step_ms"] for r in rows)
print("%.0f ms/step (median of %d), comm wait %.0f%%" %
      (ms[len(ms) // 2], len(ms),
       100 * sum(r.get("comm_wait", 0) for r in rows) / len(rows)))
EOF
}
echo "## resnet50 training steps, batch $BATCH per process"
OMP_NUM_THREADS=1 "$BIN" train $common --limit_train $((STEPS * BATCH)) \
    --ckpt_save_dir "$OUT/one" >"$OUT/one.log" 2>&1
printf '1 process, 1 thread:         '
step_ms "$OUT/one/metrics.jsonl"
"$OUT/h/mpirun" -np 2 -x OMP_NUM_THREADS=1 "$BIN" train $common \
    --limit_train $((2 * STEPS * BATCH)) --ckpt_save_dir "$OUT/slow" \
    >"$OUT/slow.log" 2>&1
printf '2 hosts at %s:          ' "$RATE"
step_ms "$OUT/slow/metrics.jsonl"
sh "$HOSTS" rate "$OUT/h" 0 off
sh "$HOSTS" rate "$OUT/h" 1 off
"$OUT/h/mpirun" -np 2 -x OMP_NUM_THREADS=1 "$BIN" train $common \
    --limit_train $((2 * STEPS * BATCH)) --ckpt_save_dir "$OUT/fast" \
    >"$OUT/fast.log" 2>&1
printf '2 hosts, unlimited veth:     '
step_ms "$OUT/fast/metrics.jsonl"
