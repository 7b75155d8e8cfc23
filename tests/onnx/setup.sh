#!/usr/bin/env bash
# Installs ONNX Runtime for Node (onnxruntime-node from npm) under a build
# directory, for the ONNX export test; idempotent.
set -euo pipefail
prefix="${1:?usage: setup.sh PREFIX}"
if [ -d "$prefix/node_modules/onnxruntime-node" ]; then
  exit 0
fi
mkdir -p "$prefix"
# --ignore-scripts: the package ships the CPU runtime; its install script
# only fetches optional GPU binaries from GitHub.
npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$prefix" \
  onnxruntime-node@1.20.1 >&2
