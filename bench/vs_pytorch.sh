#!/bin/sh
# classic against its peers, side by side in one invocation: PyTorch
# (bench/torch_bench.py) for training and inference, f32 and bf16, and
# ONNX Runtime (bench/ort_infer.js) for f32 inference.  ResNet-50 (10
# classes, ImageNet stem; ARCH=swin_t for Swin-T) training at 32x32 batch
# 32 and 128 and at 224x224 batch 16, inference at 224x224 batch 16.  Each
# config runs `classic bench` and the peer with the same threads, batch,
# resolution, warm-up and steps, and the script prints a table of img/s,
# the ratio classic / peer, MFU and peak RSS.
#
# Configs:
#   train32x32b32 train32x32b128 train224b16 infer224b16
#                 f32: classic bench against PyTorch f32.
#   <one of those>_bf16
#                 classic bench --amp O2 (bf16 activations) against
#                 PyTorch under torch.autocast("cpu", torch.bfloat16).
#   infer224b16_ort
#                 classic bench --mode infer against ONNX Runtime (npm
#                 onnxruntime-node) running `classic export --batch 16` of
#                 the same network with random weights; both f32.
# The PyTorch peer of a ResNet runs in NCHW and in channels_last and the
# faster counts (the row names it); Swin's tokens have no channels_last,
# so it runs NCHW only.
#
# Usage: bench/vs_pytorch.sh [path/to/classic]
#   THREADS=2 (default), QUICK=1 for fewer steps, REPEAT=2 alternating
#   runs of each side (the best of each is reported), CONFIGS to pick
#   configs (default "train32x32b32 train32x32b128 train224b16
#   infer224b16"; Swin: CONFIGS="train224b16 infer224b16"); CONFIGS=all
#   runs every row: the f32 ones, their _bf16 twins and infer224b16_ort
#   (for Swin the 224x224 ones only).  ORT_PREFIX: where onnxruntime-node
#   is (default <dir of classic>/onnx, the tests' copy; installed there
#   with tests/onnx/setup.sh when missing).  CONVS="rewrite measured"
#   runs classic once per `--convs` value in each round (one row each,
#   against the same peer runs): a before/after of how the convs are
#   chosen in one sitting.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLASSIC=${1:-${CLASSIC:-$ROOT/build/classic}}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
CONFIGS=${CONFIGS:-"train32x32b32 train32x32b128 train224b16 infer224b16"}
ARCH=${ARCH:-resnet50}
case $ARCH in
resnet*)
    STEM="--stem imagenet"
    LAYOUTS="nchw channels_last"
    SHAPES="train32x32b32 train32x32b128 train224b16 infer224b16"
    ;;
*)
    STEM=""
    LAYOUTS="nchw"
    SHAPES="train224b16 infer224b16"
    ;;
esac
if [ "$CONFIGS" = all ]; then
    CONFIGS="$SHAPES"
    for s in $SHAPES; do CONFIGS="$CONFIGS ${s}_bf16"; done
    CONFIGS="$CONFIGS infer224b16_ort"
fi
REPEAT=${REPEAT:-2}
VARIANTS=${CONVS:-default}
for v in $VARIANTS; do
    case $v in
    default | rewrite | direct | measured) ;;
    *) echo "vs_pytorch: CONVS: '$v' is not rewrite, direct or measured" >&2
       exit 1 ;;
    esac
done
ORT_PREFIX=${ORT_PREFIX:-$(dirname "$CLASSIC")/onnx}

# config C: sets prec (f32, bf16 or ort), mode, size, batch, warm and steps
# of config C, or fails.
config() {
    case $1 in
    *_bf16) prec=bf16 shape=${1%_bf16} ;;
    *_ort) prec=ort shape=${1%_ort} ;;
    *) prec=f32 shape=$1 ;;
    esac
    case $shape in
    train32x32b32) mode=train size=32 batch=32 warm=3 steps=10 ;;
    train32x32b128) mode=train size=32 batch=128 warm=2 steps=5 ;;
    train224b16) mode=train size=224 batch=16 warm=1 steps=4 ;;
    infer224b16) mode=infer size=224 batch=16 warm=2 steps=8 ;;
    *) echo "vs_pytorch: unknown config $1" >&2; return 1 ;;
    esac
    if [ "$prec" = ort ] && [ "$mode" != infer ]; then
        echo "vs_pytorch: $1: ONNX Runtime only infers" >&2
        return 1
    fi
}
# Every config is checked before the first one runs.
for c in $CONFIGS; do config "$c" || exit 1; done

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
case " $CONFIGS " in
*_ort\ *)
    if ! command -v node >/dev/null; then
        echo "vs_pytorch: the _ort configs need node (and npm)" >&2
        exit 1
    fi
    if [ ! -d "$ORT_PREFIX/node_modules/onnxruntime-node" ]; then
        echo "vs_pytorch: installing onnxruntime-node in $ORT_PREFIX" >&2
        bash "$ROOT/tests/onnx/setup.sh" "$ORT_PREFIX"
    fi
    ;;
esac
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

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

# export_onnx BATCH: writes $TMP/model.onnx, the f32 inference graph of a
# freshly initialised $ARCH (torchvision's init, 10 classes) at BATCH.
export_onnx() {
    $PY -c "import sys; sys.path.insert(0, sys.argv[1])
import torch, torch_models
torch.manual_seed(1234)
torch.save(torch_models.build(sys.argv[2], 10).state_dict(), sys.argv[3])" \
        "$ROOT/tools" "$ARCH" "$TMP/model.pth"
    "$CLASSIC" export --checkpoint "$TMP/model.pth" --onnx "$TMP/model.onnx" \
        --batch "$1" >&2
    rm -f "$TMP/model.pth"
}

echo "machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"
echo "classic: $CLASSIC"
echo "torch:   $($PY -c 'import torch; print(torch.__version__)')"
case " $CONFIGS " in
*_ort\ *)
    echo "ort:     onnxruntime-node $(node -p "require(require('path').resolve(
process.argv[1], 'node_modules/onnxruntime-node/package.json')).version" \
        "$ORT_PREFIX")"
    ;;
esac
ROWS=""
for c in $CONFIGS; do
    config "$c"
    if [ "${QUICK:-0}" = 1 ]; then warm=1 steps=2; fi
    args="--batch $batch --size $size --classes 10 --threads $THREADS \
--steps $steps --warmup $warm --mode $mode"
    amp="" tamp=""
    if [ "$prec" = bf16 ]; then amp="--amp O2" tamp="--amp bf16"; fi
    echo "== $c: $args $amp" >&2
    if [ "$prec" = ort ]; then export_onnx "$batch"; fi
    # Alternate the two REPEAT times and keep each one's best run: the
    # machine is shared, and a burst of other work hits whichever runs.
    pt=""
    for v in $VARIANTS; do eval "cl_$v=''"; done
    r=0
    while [ $r -lt "$REPEAT" ]; do
        r=$((r + 1))
        for v in $VARIANTS; do
            convs=""
            if [ "$v" != default ]; then convs="--convs $v"; fi
            # shellcheck disable=SC2086 # option lists, split on purpose
            out=$("$CLASSIC" bench --arch "$ARCH" $STEM $args $amp $convs)
            echo "$out" >&2
            eval "prev=\$cl_$v"
            # shellcheck disable=SC2154 # set by the eval above
            got=$(best "$prev" "$(echo "$out" | grep "^bench: mode=$mode")")
            eval "cl_$v=\$got"
        done
        if [ "$prec" = ort ]; then
            out=$(node "$ROOT/bench/ort_infer.js" "$ORT_PREFIX" \
                "$TMP/model.onnx" "$batch,3,$size,$size" "$THREADS" \
                "$warm" "$steps")
            echo "$out" >&2
            pt=$(best "$pt" "$(echo "$out" | grep "^ort: ")")
            continue
        fi
        for layout in $LAYOUTS; do
            cl_opt=""
            if [ "$layout" = channels_last ]; then cl_opt=--channels_last; fi
            # shellcheck disable=SC2086
            out=$($PY "$ROOT/bench/torch_bench.py" --arch "$ARCH" $args \
                $tamp $cl_opt)
            echo "$out" >&2
            pt=$(best "$pt" "$(echo "$out" | grep "^torch: mode=$mode")")
        done
    done
    if [ "$prec" = ort ]; then
        peer=ort
    else
        peer="torch $(field layout "$pt")"
    fi
    for v in $VARIANTS; do
        eval "cl=\$cl_$v"
        name=$c
        if [ "$v" != default ]; then name="$c $v"; fi
        ci=$(field img_s "$cl")
        ti=$(field img_s "$pt")
        peak=$(field peak_gflops "$cl")
        gf=$(field gflops "$cl")
        row=$(awk -v c="$name" -v ci="$ci" -v ti="$ti" -v gf="$gf" \
            -v pk="$peak" -v cr="$(field rss_mb "$cl")" \
            -v tr="$(field rss_mb "$pt")" -v peer="$peer" 'BEGIN {
            tg = gf * ti / ci
            printf "%-28s %9.2f %9.2f %6.2fx %7.1f%% %7.1f%% %9.0f %9.0f  %s",
                c, ci, ti, ci / ti, 100 * gf / pk, 100 * tg / pk, cr, tr, peer }')
        ROWS="$ROWS$row
"
    done
done
echo
echo "after: $(uptime | sed 's/.*load/load/')"
printf "%-28s %9s %9s %7s %8s %8s %9s %9s  %s\n" config "cl img/s" \
    "pr img/s" ratio "MFU cl" "MFU peer" "RSS cl MB" "RSS pr MB" peer
printf "%s" "$ROWS"
