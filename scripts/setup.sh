#!/usr/bin/env bash
# Installs everything hybrid-trainer needs from Debian 12 packages (run as root), and makes sure
# LibTorch runs on OpenBLAS's OpenMP build rather than the ~40x slower reference BLAS.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp
  zlib1g-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libfmt-dev
  libgtest-dev libgmock-dev
  dataset-fashion-mnist bible-kjv bible-kjv-text
  python3-torch gnuplot-nox
  libgloo-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# If libopenblas0-pthread is present apt prefers it; it fights torch's OpenMP pool. Pin openmp.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for lib in libblas.so.3 liblapack.so.3; do
  target=/usr/lib/$arch/openblas-openmp/$lib
  if [ -e "$target" ]; then
    update-alternatives --set "$lib-$arch" "$target" >/dev/null
  fi
done
echo "setup: done (BLAS: $(readlink -f /usr/lib/$arch/libblas.so.3))"
