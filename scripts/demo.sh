#!/usr/bin/env bash
# The main job of `make demo`: the most complete end-to-end run that exists.
set -euo pipefail
BUILD="${1:-build}"
"$BUILD/classic" check
