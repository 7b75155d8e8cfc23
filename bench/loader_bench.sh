#!/bin/sh
# Loader throughput, classic's cl_loader against torchvision's DataLoader
# (PIL decoding) on the same files, same pipeline, same worker count:
#  (a) Fashion-MNIST, RandomCrop(28, pad 4) + flip + Normalize;
#  (b) an ImageFolder of 500 224x224 JPEGs, RandomResizedCrop(224) + flip +
#      Normalize.
# Usage: bench/loader_bench.sh [BUILD_DIR]   (env: WORKERS=2, BATCH=64)
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WORKERS=${WORKERS:-2}
BATCH=${BATCH:-64}
PY=/usr/bin/python3
FMNIST=/usr/share/datasets/fashion-mnist
[ -x "$BUILD/loader_bench" ] || { echo "build $BUILD/loader_bench first" >&2; exit 1; }
if ! $PY -c "import PIL, torchvision" 2>/dev/null; then
    apt-get install -y python3-pil python3-torchvision >/dev/null
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# torchvision's FashionMNIST reads the uncompressed files from root/raw.
mkdir -p "$WORK/FashionMNIST/raw"
for f in "$FMNIST"/*.gz; do
    gunzip -c "$f" > "$WORK/FashionMNIST/raw/$(basename "$f" .gz)"
done
$PY bench/loader_gen.py "$WORK/jpeg" 500

ratio() { # "$classic_line" "$torch_line"
    a=$(echo "$1" | awk '{print $3}')
    b=$(echo "$2" | awk '{print $3}')
    awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio classic/torchvision %.2fx\n", a / b }'
}

echo "== (a) Fashion-MNIST 60000 train, crop+flip+normalize, $WORKERS workers"
c=$("$BUILD/loader_bench" fashion_mnist "$FMNIST" small "$WORKERS" "$BATCH" 1)
t=$($PY bench/loader_torch.py fashion "$WORK" "$WORKERS" "$BATCH" 1)
echo "$c"; echo "$t"; ratio "$c" "$t"

echo "== (b) ImageFolder 500 JPEG 224x224, RandomResizedCrop+flip+normalize, $WORKERS workers"
c=$("$BUILD/loader_bench" imagefolder "$WORK/jpeg" imagenet "$WORKERS" "$BATCH" 4)
t=$($PY bench/loader_torch.py imagefolder "$WORK/jpeg" "$WORKERS" "$BATCH" 4)
echo "$c"; echo "$t"; ratio "$c" "$t"
