#!/bin/sh
# Data-parallel throughput on one host: ResNet-50 trained by `classic train`
# as 1 rank x T threads against T ranks x 1 thread (gradient sync overlapped
# with backward, then blocking), same global batch; prints img/s, step time
# and the shares of step time spent in grad_wait (the JSONL "comm_wait")
# and inside the grad_ready hook during backward ("comm_hook").
# Run by hand, not by ctest:  bench/dist_bench.sh [build-dir]
# Environment: STEPS (optimizer steps per run, default 8), BATCH (global
# batch, default 32), STEM (cifar|imagenet, default cifar), SIDE (default
# 32), NP (ranks, default 2, = threads of the 1-rank run), SYNC_BN (1: one
# more run, overlapped, with sync_bn true; default 0).
set -eu

BUILD=${1:-build}
BIN=${CLASSIC_BIN:-$BUILD/classic}
STEPS=${STEPS:-8}
BATCH=${BATCH:-32}
STEM=${STEM:-cifar}
SIDE=${SIDE:-32}
NP=${NP:-2}
SYNC_BN=${SYNC_BN:-0}
PRINT=2
OUT=$(mktemp -d /tmp/dist-bench-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
MPIRUN="mpirun --oversubscribe --allow-run-as-root --bind-to none \
--mca btl self,vader --mca btl_vader_single_copy_mechanism none \
--mca plm_rsh_agent false"

[ -x "$BIN" ] || { echo "no classic binary at $BIN" >&2; exit 1; }

# Fashion-MNIST (the default data path), no augmentation, fixed lr; every
# PRINT steps a JSONL line; no checkpoints but the final one.
common="--model resnet50 --stem $STEM --image_size $SIDE --in_channels 1 \
--random_crop_padding 0 --hflip 0 --mean 0.286 --std 0.353 --seed 7 \
--scheduler constant --warmup_epochs 0 --lr 0.01 --val_interval 0 \
--ckpt_save_epochs 0 --per_print_times $PRINT --epoch_size 1 \
--num_parallel_workers 1 --limit_train $((STEPS * BATCH))"

# Mean of img_s, step_ms, comm_wait over the JSONL lines after the first
# (the first interval includes primitive creation and warm-up).
summary() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l][1:]
if not rows:
    sys.exit("no timed steps in " + sys.argv[1])
m = lambda k: sum(r.get(k, 0) for r in rows) / len(rows)
print("| %-28s | %7.1f | %8.0f | %9.1f%% | %9.1f%% |" %
      (sys.argv[2], m("img_s"), m("step_ms"), 100 * m("comm_wait"),
       100 * m("comm_hook")))
EOF
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load:$(uptime | sed 's/.*load average://')"
echo "# resnet50 $STEM stem ${SIDE}x$SIDE, global batch $BATCH, $STEPS steps (first $PRINT not timed)"
echo "| run                          |   img/s |  ms/step | comm wait | in hook   |"
echo "| ---------------------------- | ------- | -------- | --------- | --------- |"

OMP_NUM_THREADS=$NP "$BIN" train $common --threads "$NP" \
    --batch_size "$BATCH" --ckpt_save_dir "$OUT/one" >"$OUT/one.log" 2>&1 ||
    { cat "$OUT/one.log" >&2; exit 1; }
summary "$OUT/one/metrics.jsonl" "1 rank x $NP threads"

modes="overlap blocking"
[ "$SYNC_BN" = 1 ] && modes="$modes syncbn"
for mode in $modes; do
    extra="--grad_sync $mode"
    [ "$mode" = syncbn ] && extra="--grad_sync overlap --sync_bn true"
    $MPIRUN -np "$NP" -x OMP_NUM_THREADS=1 "$BIN" train $common --threads 1 \
        --batch_size $((BATCH / NP)) $extra \
        --ckpt_save_dir "$OUT/$mode" >"$OUT/$mode.log" 2>&1 ||
        { cat "$OUT/$mode.log" >&2; exit 1; }
    label="$mode"
    [ "$mode" = syncbn ] && label="overlap, SyncBN"
    summary "$OUT/$mode/metrics.jsonl" "$NP ranks x 1 thread, $label"
done
echo "# load after:$(uptime | sed 's/.*load average://')"
