#!/usr/bin/env bash
# Time-to-accuracy of the Fashion-MNIST recipe, classic against PyTorch, one
# after the other on this machine: the same recipe file, the same training
# images (the first LIMIT), the same epochs, both evaluated on the 10,000
# test images after each epoch.  Prints one line per evaluation with the
# training wall time so far (evaluation excluded on both sides).
#
#   bash bench/fashion_mnist_tta.sh [build/classic]
#   LIMIT=0 EPOCHS=6 ...   the whole training set and the recipe's schedule
#
# LIMIT (default 12800) training images, EPOCHS (default 2: one warm-up and
# one cosine epoch) epochs, THREADS (default nproc) for both.  Both sides
# follow the recipe's amp_level (PyTorch's O1/O2 is torch.autocast to
# bfloat16); TORCH_AMP=O0|O2 overrides it on the PyTorch side only, to time
# PyTorch at whichever precision is faster for it.
set -euo pipefail
CLASSIC="${1:-build/classic}"
CONFIG="${CONFIG:-configs/resnet50_fashion_mnist.yaml}"
LIMIT="${LIMIT:-12800}"
EPOCHS="${EPOCHS:-2}"
THREADS="${THREADS:-$(nproc)}"
OUT="${OUT:-runs/tta}"
TORCH_AMP="${TORCH_AMP:-}"
mkdir -p "$OUT"
lim=()
[ "$LIMIT" != 0 ] && lim=(--limit_train "$LIMIT")

echo "== classic: $CONFIG, ${LIMIT/#0/all} images, $EPOCHS epochs, $THREADS threads"
rm -rf "$OUT/classic"
OMP_NUM_THREADS="$THREADS" "$CLASSIC" train -c "$CONFIG" "${lim[@]}" \
    --epoch_size "$EPOCHS" --ckpt_save_dir "$OUT/classic" \
    --per_print_times 100 > "$OUT/classic.log" 2>&1
python3 - "$OUT/classic/metrics.jsonl" <<'EOF'
import json, sys
t = 0.0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "eval":
        t += r["epoch_s"]
        print("classic: epoch=%d train_s=%.1f top1=%.4f" % (r["epoch"], t, r["val_top1"]))
EOF

echo "== PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') ${TORCH_AMP:+amp $TORCH_AMP}"
/usr/bin/python3 bench/fashion_mnist_torch.py --config "$CONFIG" \
    --threads "$THREADS" --epochs "$EPOCHS" --limit_train "$LIMIT" \
    ${TORCH_AMP:+--amp "$TORCH_AMP"} \
    --out "$OUT/torch.jsonl" > "$OUT/torch.log" 2>&1
python3 - "$OUT/torch.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "eval":
        print("torch:   epoch=%d train_s=%.1f top1=%.4f" % (r["epoch"], r["train_s"], r["top1"]))
EOF
