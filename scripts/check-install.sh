#!/usr/bin/env bash
# Installs classic into a temporary prefix (`make install PREFIX=...`),
# checks that libclassic.so exports the public API only, builds
# examples/classify.c against the installed copy through pkg-config and
# runs it on a checkpoint that the installed `classic` trains on a tiny
# generated ImageFolder, then asks the installed Python module the same;
# builds examples/train.c likewise, lets it train, and stops another run of
# it through its own SIGINT handler.  Usage: scripts/check-install.sh
# [BUILD_DIR]
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

# examples/train.c: a host program keeping SIGINT and MPI to itself
# (cl_train_ex).  One run to its end, then one stopped by SIGINT, which its
# own handler turns into a stop through the progress callback.
cc -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L \
    examples/train.c $(pkg-config --cflags --libs classic) -o "$tmp/train"
cat >"$tmp/recipe.yaml" <<EOF
dataset: imagefolder
data_dir: $tmp/data
val_split: val
model: resnet18
image_size: 32
in_channels: 1
mean: [0.5]
std: [0.25]
batch_size: 4
num_parallel_workers: 0
per_print_times: 1
log_level: warn
EOF
LD_LIBRARY_PATH="$libdir" "$tmp/train" "$tmp/recipe.yaml" epoch_size=1 \
    "ckpt_save_dir=$tmp/ex" >"$tmp/ex.log" 2>&1 || {
    cat "$tmp/ex.log" >&2
    echo "check-install: examples/train.c failed" >&2
    exit 1
}
grep -q '^trained 2 steps' "$tmp/ex.log" || {
    cat "$tmp/ex.log" >&2
    echo "check-install: examples/train.c did not train" >&2
    exit 1
}
LD_LIBRARY_PATH="$libdir" "$tmp/train" "$tmp/recipe.yaml" epoch_size=200 \
    "ckpt_save_dir=$tmp/ex_int" >"$tmp/ex_int.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
    grep -q '^step 1/' "$tmp/ex_int.log" && break
    sleep 0.1
done
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
if [ "$rc" != 3 ] || ! grep -q 'stopped by the caller' "$tmp/ex_int.log"; then
    cat "$tmp/ex_int.log" >&2
    echo "check-install: examples/train.c exited $rc after SIGINT, not 3" \
        "(a stop through its own handler)" >&2
    exit 1
fi
echo "check-install: examples/train.c trained, and its own SIGINT handler" \
    "stopped another run ($(grep -o 'after step [0-9]*' "$tmp/ex_int.log"))"

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
