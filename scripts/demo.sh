#!/usr/bin/env bash
# The main job of `make demo`: train ResNet-50 on Fashion-MNIST (Debian's
# dataset-fashion-mnist) for a short run, evaluate it on the test set and
# predict a few test images exported as PNG files.
#
# DEMO_TRAIN (default 2048) training images, DEMO_EPOCHS (default 1) epochs,
# DEMO_VAL (default 1000) test images; DEMO_TRAIN=0 DEMO_VAL=0 uses them all.
# The short run uses batch 32 and lr 0.02 with zero-initialised residual
# BNs: ResNet-50 at the recipe's lr 0.1 needs its warm-up epochs, which a
# one-epoch demo does not have (PyTorch diverges there the same way).
set -euo pipefail
BUILD="${1:-build}"
CLASSIC="$BUILD/classic"
RUN="${DEMO_RUN:-runs/demo}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

CHECK_OUT="$("$CLASSIC" check)"
echo "$CHECK_OUT"
# The recipe trains in bf16 (amp_level O2), which oneDNN runs on AVX-512
# CPUs only; elsewhere the demo says so and trains in f32.
AMP=()
if ! grep -q '^cpu isa *avx512_core' <<<"$CHECK_OUT"; then
    echo "this CPU has no AVX-512: the demo trains in f32 (--amp O0)"
    AMP=(--amp O0)
fi
echo
echo "== data: what the labels look like =="
"$CLASSIC" data info --show 5
echo
echo "== train: ResNet-50 (CIFAR stem, gray input) on Fashion-MNIST =="
# --overwrite true: a second `make demo` replaces the demo's own run in
# $RUN (a training run refuses a folder holding another run otherwise).
"$CLASSIC" train --config configs/resnet50_fashion_mnist.yaml \
    --limit_train "${DEMO_TRAIN:-2048}" --limit_val "${DEMO_VAL:-1000}" \
    --epoch_size "${DEMO_EPOCHS:-1}" --warmup_epochs 0 --lr 0.02 \
    --batch_size 32 --zero_init_residual true \
    --per_print_times 8 --ckpt_save_dir "$RUN" --overwrite true "${AMP[@]}"
CKPT="$RUN/resnet50-last.safetensors"
echo
echo "== eval: the checkpoint on the test set =="
"$CLASSIC" eval --checkpoint "$CKPT" --limit_val "${DEMO_VAL:-1000}" \
    --csv "$RUN/confusion.csv"
echo
echo "== predict: three test images as a user would pass them =="
for i in 0 1 2; do
    "$CLASSIC" data export --usage test --index "$i" --out "$RUN/test$i.png"
done
"$CLASSIC" predict --checkpoint "$CKPT" --top 3 "$RUN"/test0.png \
    "$RUN"/test1.png "$RUN"/test2.png
echo
echo "run directory: $RUN (config.yaml, metrics.jsonl, checkpoints)"
