#!/usr/bin/env bash
# Installs every Debian 12 package classic builds, tests and demos with.
# Idempotent and non-interactive: packages already present are skipped.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libdnnl-dev
  libopenmpi-dev openmpi-bin
  libjpeg62-turbo-dev libpng-dev zlib1g-dev libyaml-dev
  dataset-fashion-mnist
  chromium chromium-driver
  libmicrohttpd-dev curl wrk
  python3-torch python3-torchvision nodejs npm
  python3-numpy python3-pytest
  clang clang-format libclang-rt-14-dev libomp-14-dev
)

missing=()
for p in "${PKGS[@]}"; do
  # Node.js and npm may come from another source than Debian's packages
  # (Debian's npm then conflicts with it): a working command is enough.
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
  esac
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
