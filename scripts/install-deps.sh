#!/usr/bin/env bash
# Installs the Debian packages nextn's build needs. Idempotent; run as root.
set -euo pipefail
pkgs=(cmake ninja-build g++ make nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libhwy-dev clang libclang-rt-14-dev
      pkg-config libpcre2-dev libicu-dev libboost1.74-dev python3-pip)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "note: nvcc not found: the build goes on without the CUDA backend" >&2
fi
