#!/bin/sh
# classic vs PyTorch, side by side in one invocation: ResNet-50 (10 classes,
# ImageNet stem, fp32; ARCH=swin_t for Swin-T) training at 32x32 batch 32
# and 128 and at 224x224 batch 16, inference at 224x224 batch 16 (Swin:
# CONFIGS="train224b16 infer224b16"); each config runs `classic bench`
# and then bench/torch_bench.py with the same threads, batch, resolution,
# warm-up and steps.  Prints a table of img/s, the ratio, MFU and peak RSS.
#
# Usage: bench/vs_pytorch.sh [path/to/classic]
#   THREADS=2 (default), QUICK=1 for fewer steps, REPEAT=2 alternating
#   runs of each side (the best of each is reported), CONFIGS to pick
#   configs ("train32x32b32 train32x32b128 train224b16 infer224b16").
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLASSIC=${1:-${CLASSIC:-$ROOT/build/classic}}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
CONFIGS=${CONFIGS:-"train32x32b32 train32x32b128 train224b16 infer224b16"}
ARCH=${ARCH:-resnet50}
case $ARCH in
resnet*) STEM="--stem imagenet" ;;
*) STEM="" ;;
esac
REPEAT=${REPEAT:-2}

if [ ! -x "$CLASSIC" ]; then
    echo "vs_pytorch: $CLASSIC is not an executable (build first or pass it)" >&2
    exit 1
fi
if ! $PY -c "import torch, torchvision" 2>/dev/null; then
    echo "vs_pytorch: installing python3-torch python3-torchvision" >&2
    apt-get install -y python3-torch python3-torchvision >&2
fi
# Debian's torch runs nn.Linear through the system BLAS: with only the
# reference libblas3 a transformer trains ~8x slower than with OpenBLAS,
# which is what a user of the peer would have installed.
if ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
    echo "vs_pytorch: installing libopenblas0-pthread for torch" >&2
    apt-get install -y libopenblas0-pthread >&2
fi

# field KEY LINE: the value of KEY=... in LINE.
field() {
    echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# best A B: the result line with the higher img_s (A may be empty).
best() {
    if [ -z "$1" ]; then
        echo "$2"
        return
    fi
    if awk -v a="$(field img_s "$1")" -v b="$(field img_s "$2")" \
        'BEGIN { exit !(b > a) }'; then
        echo "$2"
    else
        echo "$1"
    fi
}

echo "machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"
echo "classic: $CLASSIC"
echo "torch:   $($PY -c 'import torch; print(torch.__version__)')"
ROWS=""
for c in $CONFIGS; do
    case $c in
    train32x32b32) mode=train size=32 batch=32 warm=3 steps=10 ;;
    train32x32b128) mode=train size=32 batch=128 warm=2 steps=5 ;;
    train224b16) mode=train size=224 batch=16 warm=1 steps=4 ;;
    infer224b16) mode=infer size=224 batch=16 warm=2 steps=8 ;;
    *) echo "vs_pytorch: unknown config $c" >&2; exit 1 ;;
    esac
    if [ "${QUICK:-0}" = 1 ]; then warm=1 steps=2; fi
    args="--batch $batch --size $size --classes 10 --threads $THREADS \
--steps $steps --warmup $warm --mode $mode"
    echo "== $c: $args" >&2
    # Alternate the two REPEAT times and keep each one's best run: the
    # machine is shared, and a burst of other work hits whichever runs.
    cl="" pt=""
    r=0
    while [ $r -lt "$REPEAT" ]; do
        r=$((r + 1))
        out=$("$CLASSIC" bench --arch "$ARCH" $STEM $args)
        echo "$out" >&2
        cl=$(best "$cl" "$(echo "$out" | grep "^bench: mode=$mode")")
        out=$($PY "$ROOT/bench/torch_bench.py" --arch "$ARCH" $args)
        echo "$out" >&2
        pt=$(best "$pt" "$(echo "$out" | grep "^torch: mode=$mode")")
    done
    ci=$(field img_s "$cl")
    ti=$(field img_s "$pt")
    peak=$(field peak_gflops "$cl")
    gf=$(field gflops "$cl")
    row=$(awk -v c="$c" -v ci="$ci" -v ti="$ti" -v gf="$gf" -v pk="$peak" \
        -v cr="$(field rss_mb "$cl")" -v tr="$(field rss_mb "$pt")" 'BEGIN {
        tg = gf * ti / ci
        printf "%-15s %9.2f %9.2f %6.2fx %7.1f%% %7.1f%% %9.0f %9.0f",
            c, ci, ti, ci / ti, 100 * gf / pk, 100 * tg / pk, cr, tr }')
    ROWS="$ROWS$row
"
done
echo
echo "after: $(uptime | sed 's/.*load/load/')"
printf "%-15s %9s %9s %7s %8s %8s %9s %9s\n" config classic torch ratio \
    "MFU cl" "MFU pt" "RSS cl MB" "RSS pt MB"
printf "%s" "$ROWS"
