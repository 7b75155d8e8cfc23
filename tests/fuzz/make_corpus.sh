#!/usr/bin/env bash
# Regenerates the seed corpora tests/fuzz/corpus/<target>/ from
# make_corpus.c (small valid files of every format the fuzzers read).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/corpus}"
for t in idx cifar_bin cifar_tar jpeg png safetensors ckpt json yaml \
         class_indexing; do
  mkdir -p "$out/$t"
done
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
${CC:-cc} -std=c11 -O1 -Wall -Wextra -o "$bin/make_corpus" \
  "$here/make_corpus.c" -lpng -ljpeg -lz
"$bin/make_corpus" "$out"
du -sh "$out"
