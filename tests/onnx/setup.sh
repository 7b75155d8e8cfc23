#!/usr/bin/env bash
# Installs ONNX Runtime for Node (onnxruntime-node from npm) under a build
# directory, for the ONNX export tests; idempotent.  ctest runs those tests
# in parallel: a lock serialises the install, and a marker written after it
# completes tells the others it is usable (npm creates the package folder
# long before it has finished).
set -euo pipefail
prefix="${1:?usage: setup.sh PREFIX}"
mkdir -p "$prefix"
exec 9>"$prefix/.install.lock"
flock 9
if [ -f "$prefix/.installed" ] &&
   [ -d "$prefix/node_modules/onnxruntime-node" ]; then
  exit 0
fi
# --ignore-scripts: the package ships the CPU runtime; its install script
# only fetches optional GPU binaries from GitHub.
npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$prefix" \
  onnxruntime-node@1.20.1 >&2
touch "$prefix/.installed"
