#!/usr/bin/env bash
# Installs classic into a temporary prefix (`make install PREFIX=...`),
# checks that libclassic.so exports the public API only, builds
# examples/classify.c against the installed copy through pkg-config and
# runs it on a checkpoint that the installed `classic` trains on a tiny
# generated ImageFolder, then asks the installed Python module the same.  Usage: scripts/check-install.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${BUILD:-build}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
make --no-print-directory install BUILD="$build" PREFIX="$prefix" >/dev/null
pc=$(find "$prefix" -name classic.pc)
libdir=$(dirname "$(dirname "$pc")")
for f in "$prefix/include/classic/classic.h" "$libdir/libclassic.a" \
    "$libdir/libclassic.so" "$prefix/bin/classic"; do
    [ -e "$f" ] || { echo "check-install: $f was not installed" >&2; exit 1; }
done
soname=$(objdump -p "$libdir/libclassic.so" | awk '/SONAME/ {print $2}')
syms=$(nm -D --defined-only "$libdir/libclassic.so" | awk '{print $3}')
bad=$(echo "$syms" | grep -v '^cl_' || true)
if [ -n "$bad" ]; then
    echo "check-install: libclassic.so exports non-API symbols:" $bad >&2
    exit 1
fi
echo "check-install: $soname exports $(echo "$syms" | wc -l) symbols, all cl_"

# Two classes of 32 x 32 gray PNGs, a train and a val split.
python3 - "$tmp/data" <<'PY'
import os, struct, sys, zlib
def png(path, shade):
    rows = b"".join(b"\0" + bytes((shade + x + y) % 256 for x in range(32))
                    for y in range(32))
    def chunk(t, d):
        return (struct.pack(">I", len(d)) + t + d
                + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", 32, 32, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
for split, n in (("train", 8), ("val", 4)):
    for cls, shade in (("dark", 10), ("light", 180)):
        os.makedirs(os.path.join(sys.argv[1], split, cls), exist_ok=True)
        for i in range(n // 2):
            png(os.path.join(sys.argv[1], split, cls, "%d.png" % i), shade + i)
PY
"$prefix/bin/classic" train --dataset imagefolder --data_dir "$tmp/data" \
    --val_split val --model resnet18 --image_size 32 --in_channels 1 \
    --mean 0.5 --std 0.25 --batch_size 4 --epoch_size 1 \
    --num_parallel_workers 0 --ckpt_save_dir "$tmp/ckpt" >"$tmp/train.log" 2>&1 ||
    { cat "$tmp/train.log" >&2; exit 1; }

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror examples/classify.c \
    $(pkg-config --cflags --libs classic) -o "$tmp/classify"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/classify" \
    "$tmp/ckpt/resnet18-last.safetensors" "$tmp/data/val/dark/0.png")
echo "$out"
echo "$out" | grep -Eq '^  1\. (dark|light) ' ||
    { echo "check-install: the example printed no top class" >&2; exit 1; }
echo "check-install: examples/classify.c built against the install and ran"

# The installed Python module finds the installed library by itself and
# names the same top class.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    py=$(PYTHONPATH="$libdir/python3/dist-packages" /usr/bin/python3 -c '
import sys, classic
m = classic.Model(sys.argv[1])
print(m.top_k(sys.argv[2], 1)[0][0])' "$tmp/ckpt/resnet18-last.safetensors" \
        "$tmp/data/val/dark/0.png")
    want=$(echo "$out" | awk '$1 == "1." {print $2}')
    [ "$py" = "$want" ] || {
        echo "check-install: python says '$py', the example '$want'" >&2
        exit 1
    }
    echo "check-install: the installed Python module agrees ($py)"
fi
