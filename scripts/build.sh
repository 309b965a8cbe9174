#!/usr/bin/env bash
# Configures and builds hybrid-trainer in build/ (Release, Ninja, ccache, precompiled torch header).
# Extra arguments go to cmake's configure step, e.g. -DCMAKE_PREFIX_PATH=/opt/libtorch for LibTorch 2.x.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${HT_BUILD_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
