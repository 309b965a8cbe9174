#!/usr/bin/env bash
# Builds and runs tests/dist/device_check.cpp against a pip-installed CUDA PyTorch (its LibTorch):
# the dist layer's NCCL path on a GPU and its Gloo path on LibTorch 2.x headers. Not part of the
# normal build (Debian's LibTorch is CPU-only); the lent GPU machine runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
torch_dir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
abi=$("$py" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo none)"
echo "torch at $torch_dir ($("$py" -c 'import torch; print(torch.__version__)')); gloo headers: $(ls -d "$torch_dir/include/gloo" 2>/dev/null || echo missing)"
out=/tmp/device_check
srcs="tests/dist/device_check.cpp src/dist/process_group.cpp src/dist/data_parallel.cpp src/dist/checksum.cpp
      src/dist/sharded_data.cpp src/dist/zero_adamw.cpp src/core/parallel.cpp src/kernels/adamw.cpp"
flags=(-std=c++17 -O1 -fopenmp -D_GLIBCXX_USE_CXX11_ABI="$abi" -DUSE_C10D_GLOO -DUSE_C10D_NCCL -DHT_WITH_NCCL
       -DHT_WITH_CUDA -Iinclude -Isrc -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include"
       -I/usr/local/cuda/include)
# Wheels ship no Gloo headers (as Debian's libtorch-dev ships none): GLOO_INCLUDE points at a copy
# of libgloo-dev's /usr/include (only declarations are used; the wheel links its own Gloo).
if [ -n "${GLOO_INCLUDE:-}" ]; then flags+=(-I"$GLOO_INCLUDE"); fi
objs=()
for src in $srcs; do  # one compiler per source, side by side
  obj="$out.$(basename "$src" .cpp).o"
  g++ "${flags[@]}" -c "$src" -o "$obj" &
  objs+=("$obj")
done
wait
g++ -fopenmp "${objs[@]}" -o "$out" -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" \
  -Wl,--no-as-needed -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda -Wl,--as-needed
"$out"
