#!/bin/sh
# Inference at each precision against ONNX Runtime, side by side in one
# invocation: for ResNet-50 (ARCH=swin_t for Swin-T) at SIZE (224) and
# each batch in BATCHES, `classic bench --mode infer --precision P` for
# every precision this CPU runs (f32, int8, and bf16 where it has bf16 dot
# products; a refused precision prints its sentence), then ONNX Runtime
# (npm onnxruntime-node, ORT_VERSION) on `classic export --batch N` of the
# same network with the same threads: f32 beside f32 and bf16, and for
# int8 the QDQ export of the network quantized by `classic quantize` (on
# 64 random images; ORT fuses the QDQ pairs into its int8 kernels), beside
# classic's int8 plan of the same layers.  REPEAT rounds alternate the
# sides; the best of each is reported, with classic's MFU against the peak
# bench measures for that precision and the ratio to ONNX Runtime.
#
# Usage: bench/deploy_bench.sh [path/to/classic]
#   THREADS=2, BATCHES="1 16", SIZE=224, REPEAT=2, STEPS=20 (timed), WARMUP=3,
#   ORT_VERSION=1.30.0, ORT_PREFIX (default <dir of classic>/ort-<version>,
#   installed there with npm --ignore-scripts when missing).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLASSIC=${1:-${CLASSIC:-$ROOT/build/classic}}
THREADS=${THREADS:-2}
BATCHES=${BATCHES:-"1 16"}
REPEAT=${REPEAT:-2}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
ARCH=${ARCH:-resnet50}
SIZE=${SIZE:-224}
ORT_VERSION=${ORT_VERSION:-1.30.0}
ORT_PREFIX=${ORT_PREFIX:-$(dirname "$CLASSIC")/ort-$ORT_VERSION}
PY=/usr/bin/python3
case $ARCH in
resnet*) STEM="--stem imagenet" ;;
*) STEM="" ;;
esac

if [ ! -d "$ORT_PREFIX/node_modules/onnxruntime-node" ]; then
    echo "deploy_bench: installing onnxruntime-node@$ORT_VERSION in" \
        "$ORT_PREFIX" >&2
    mkdir -p "$ORT_PREFIX"
    npm install --silent --no-audit --no-fund --ignore-scripts \
        --prefix "$ORT_PREFIX" "onnxruntime-node@$ORT_VERSION" >&2
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The same freshly initialised network (torchvision's init, 10 classes)
# for both sides: classic reads the .pth, ONNX Runtime its export.
$PY -c "import sys; sys.path.insert(0, sys.argv[1])
import torch, torch_models
torch.manual_seed(1234)
torch.save(torch_models.build(sys.argv[2], 10).state_dict(), sys.argv[3])" \
    "$ROOT/tools" "$ARCH" "$TMP/model.pth"
# Its int8 model: converted (ImageNet's eval pipeline) and quantized on
# random images; only the speed of either side means anything here.
mkdir -p "$TMP/calib"
$PY -c "import sys, torch, torchvision
torch.manual_seed(7)
for i in range(64):
    torchvision.io.write_jpeg(torch.randint(0, 256, (3, 256, 256),
        dtype=torch.uint8), '%s/%03d.jpg' % (sys.argv[1], i))" "$TMP/calib"
"$CLASSIC" convert "$TMP/model.pth" "$TMP/model.safetensors" \
    --image_size "$SIZE" >/dev/null
"$CLASSIC" quantize --checkpoint "$TMP/model.safetensors" --calib "$TMP/calib" \
    --samples 64 --out "$TMP/q.safetensors" >/dev/null

echo "machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"
"$CLASSIC" check | sed 's/^/check:   /'
echo "ort:     onnxruntime-node $ORT_VERSION"

# The larger img/s of two "key=value" lines' img_s (either may be "").
best() {
    a=$(echo "$1" | sed -n 's/.*img_s=\([0-9.]*\).*/\1/p')
    b=$(echo "$2" | sed -n 's/.*img_s=\([0-9.]*\).*/\1/p')
    if [ -z "$a" ]; then echo "$2"; elif [ -z "$b" ]; then echo "$1"
    elif awk "BEGIN{exit !($b > $a)}"; then echo "$2"; else echo "$1"; fi
}
field() { echo "$1" | sed -n "s/.* $2=\([0-9.]*\).*/\1/p"; }

printf '\n%-22s %12s %8s %12s %8s\n' config "img/s" MFU "ORT img/s" ratio
for n in $BATCHES; do
    "$CLASSIC" export --checkpoint "$TMP/model.safetensors" --onnx "$TMP/m$n.onnx" \
        --batch "$n" >/dev/null
    "$CLASSIC" export --checkpoint "$TMP/q.safetensors" --onnx "$TMP/q$n.onnx" \
        --batch "$n" >/dev/null
    f32="" bf16="" int8="" ort="" ort8="" bf16_why=""
    r=0
    while [ $r -lt "$REPEAT" ]; do
        for p in f32 int8 bf16; do
            out=$("$CLASSIC" bench --arch "$ARCH" $STEM --classes 10 \
                --size "$SIZE" --batch "$n" --threads "$THREADS" --mode infer \
                --precision $p --steps "$STEPS" --warmup "$WARMUP" 2>&1) ||
                { bf16_why=$(echo "$out" | tail -1); continue; }
            line=$(echo "$out" | grep '^bench: mode=infer')
            case $p in
            f32) f32=$(best "$f32" "$line") ;;
            int8) int8=$(best "$int8" "$line") ;;
            *) bf16=$(best "$bf16" "$line") ;;
            esac
        done
        o=$(node "$ROOT/bench/ort_infer.js" "$ORT_PREFIX" "$TMP/m$n.onnx" \
            "$n,3,$SIZE,$SIZE" "$THREADS" "$WARMUP" "$STEPS" | grep '^ort: ')
        ort=$(best "$ort" "$o")
        o=$(node "$ROOT/bench/ort_infer.js" "$ORT_PREFIX" "$TMP/q$n.onnx" \
            "$n,3,$SIZE,$SIZE" "$THREADS" "$WARMUP" "$STEPS" | grep '^ort: ')
        ort8=$(best "$ort8" "$o")
        r=$((r + 1))
    done
    for p in f32 bf16 int8; do
        case $p in
        f32) line=$f32 o=$(field " $ort" img_s) ;;
        bf16) line=$bf16 o=$(field " $ort" img_s) ;;
        *) line=$int8 o=$(field " $ort8" img_s) ;;
        esac
        if [ -z "$line" ]; then
            printf '%-22s %s\n' "$ARCH b$n $p" "refused: $bf16_why"
            continue
        fi
        c=$(field " $line" img_s)
        printf '%-22s %12s %7s%% %12s %7.2fx\n' "$ARCH b$n $p" "$c" \
            "$(field " $line" mfu)" "$o" "$(awk "BEGIN{print $c / $o}")"
    done
done
echo "(ORT beside f32 and bf16: its f32 run; beside int8: the QDQ export)"
echo "after:   $(uptime | sed 's/.*load/load/')"
