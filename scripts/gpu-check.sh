#!/usr/bin/env bash
# The GPU check: builds hybrid-trainer against the LibTorch 2.x (CUDA) that the GPU machine's
# Python carries, trains on the GPU, compares CUDA's peak memory with the planner, runs the suite.
#
#   bash scripts/gpu-check.sh prepare   # here (Debian, with the packages): fills build-gpu-deps/
#   bash scripts/gpu-check.sh run       # there: build, GPU runs, tests; log in $OUT (or build-gpu/)
#   bash scripts/gpu-check.sh quick     # there: build the CLI only, GPU runs, no test suite
#   bash scripts/gpu-check.sh one test_kernels 'Shapes/FlashVsNaive.*'   # there: one test binary
#   bash scripts/gpu-check.sh nowcast   # there: the CUDA tests, then FM-16 plain vs WNN+ on the GPU
#   bash scripts/gpu-check.sh record    # there: the CUDA tests, then record v2's GPT parts on the GPU
#
# The GPU machine has no package registry, so `prepare` copies what the build needs from this
# machine's Debian packages into build-gpu-deps/ (header-only fmt, toml++, CLI11, nlohmann-json,
# zlib headers, GoogleTest sources) plus a text corpus; the device tool carries that folder over:
#   run(command="bash scripts/gpu-check.sh run", carry=["build-gpu-deps"], timeout_s=560)
set -euo pipefail
cd "$(dirname "$0")/.."
deps=build-gpu-deps

prepare() {
  rm -rf "$deps" && mkdir -p "$deps/include"
  # gloo: the declarations ProcessGroupGloo.hpp includes (wheels ship none; the wheel links its own Gloo).
  cp -r /usr/include/fmt /usr/include/toml++ /usr/include/CLI /usr/include/nlohmann /usr/include/gloo "$deps/include/"
  cp /usr/include/zlib.h /usr/include/zconf.h "$deps/include/" 2>/dev/null ||
    cp /usr/include/zlib.h /usr/include/x86_64-linux-gnu/zconf.h "$deps/include/"
  cp -r /usr/src/googletest "$deps/googletest"
  # The KJV Bible as plain text (the `bible` program is not there): data.dataset=text.
  bible -f gen1:1-rev22:21 | sed 's/^[^ ]* //' > "$deps/kjv.txt"
  # Fashion-MNIST's IDX files (30 MB) for FM-16 on the GPU (`nowcast`).
  cp -r /usr/share/datasets/fashion-mnist "$deps/fashion-mnist"
  du -sh "$deps"
}

run() {
  local with_tests=${1:-1}
  local out=${OUT:-build-gpu}
  mkdir -p "$out"
  exec > >(tee "$out/gpu-check.log") 2>&1
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  grep -m1 "model name" /proc/cpuinfo; nproc
  [ -d "$deps" ] || { echo "no $deps/: run 'gpu-check.sh prepare' on the Debian machine and carry it"; exit 2; }
  local python=python3 prefix abi
  prefix=$($python -c 'import torch; print(torch.utils.cmake_prefix_path)')
  abi=$($python -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  $python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'

  echo "== build (LibTorch from the Python wheel, CXX11 ABI $abi)"
  local t0=$SECONDS
  # Torch's own CMake config may need CUDA's nvcc/toolkit paths; the wheel's libraries are found
  # through its cmake prefix. Everything else comes from $deps, built with the wheel's ABI.
  local tests=ON target=()
  [ "$with_tests" = 1 ] || { tests=OFF; target=(--target hybrid-train); }
  # One CTest test per case there: ctest -j 16 spreads the cases over the cores (at home, on 2
  # cores, one per suite saves the ~0.85 s libtorch load each case's process would pay).
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHT_USE_PCH=ON -DHT_BUILD_BENCH=OFF -DHT_BUILD_TESTS=$tests \
    -DHT_TEST_PER_CASE=ON -DCMAKE_PREFIX_PATH="$prefix" -DHT_DEPS_DIR="$PWD/$deps" -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" \
    > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j "$(nproc)" "${target[@]}" > "$out/build.log" 2>&1 || { grep -B2 -A12 "error" "$out/build.log" | head -80; exit 1; }
  echo "built in $((SECONDS - t0)) s"

  if [ "$with_tests" = 1 ]; then
    echo "== the device seam on the GPU (tests/integration/cuda_test.cpp)"
    build-gpu/tests/test_integration --gtest_filter='Cuda.*' 2>&1 | tee "$out/cuda_tests.log" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|error|Expected|Which is|max difference|\(\+0x" | head -60 || true
  fi

  echo "== tiny GPT on the GPU (KJV text, 200 steps)"
  local bin=build-gpu/hybrid-train common="data.dataset=text data.path=$deps/kjv.txt run.threads=4 checkpoint.every_steps=0 checkpoint.every_seconds=0"
  rm -rf "$out/tiny"
  $bin train configs/tiny-gpt-kjv.toml $common run.device=cuda train.steps=200 train.eval_every=100 \
    run.out_dir="$out/tiny" sample.tokens=60 2>&1 | tail -12 || echo "the tiny run failed"

  echo "== GPT-2 small: a few steps on the GPU, fp32 and bf16, against the planner"
  for run in "fp32 64 naive" "bf16 64 naive" "fp32 1024 naive" "bf16 1024 naive" "fp32 1024 flash" "bf16 1024 fused"; do
    local precision T attention
    read -r precision T attention <<< "$run"
      local dir="$out/gpt2-$precision-$T-$attention"
      rm -rf "$dir"
      if ! $bin config model.preset=gpt2 train.precision=$precision > /dev/null 2>&1; then
        echo "train.precision=$precision: not a key of this build (skipped)"; continue
      fi
      $bin train configs/gpt2-kjv.toml $common run.device=cuda model.preset=gpt2 data.batch_size=4 data.context=$T \
        model.attention=$attention train.precision=$precision train.steps=6 train.eval_every=0 data.val_batches=1 \
        run.out_dir="$dir" sample.tokens=0 \
        > "$dir.log" 2>&1 || { tail -20 "$dir.log"; continue; }
      # Steps 2-6 (the first pays for CUDA's start-up): median step time and peak from CUDA's allocator.
      python3 - "$dir/metrics.jsonl" "$precision" "$T" "$attention" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type": "step"' in l or '"type":"step"' in l]
ms = statistics.median(r["ms"] for r in recs[1:])
peak = max(r["peak_bytes"] for r in recs) / 2**20
print(f"GPT-2 small {sys.argv[2]} B 4 T {sys.argv[3]} attention {sys.argv[4]}: median step {ms:.1f} ms, "
      f"peak {peak:.1f} MiB (CUDA allocator)")
PY
      $bin plan configs/gpt2-kjv.toml model.preset=gpt2 data.batch_size=4 data.context=$T train.precision=$precision \
        model.attention=$attention run.device=cuda | grep -E "^  peak" | sed "s/^/  planner: /" || true
  done

  [ "$with_tests" = 1 ] || return 0
  echo "== test suite (LibTorch 2.x build; CPU tests)"
  t0=$SECONDS
  timeout 110 ctest --test-dir build-gpu -j 16 --timeout 100 -E "^Cuda\." > "$out/ctest.log" 2>&1 || true
  grep -E "tests passed|tests failed|\*\*\*|Failed" "$out/ctest.log" | head -40
  echo "tests took $((SECONDS - t0)) s"
}

# One test binary with a gtest filter, its whole output: to look again at a failure of `run`.
one() {
  local target=$1 filter=$2 out=${OUT:-build-gpu}
  mkdir -p "$out"
  local prefix abi
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  grep -m1 "model name" /proc/cpuinfo; grep -o -m1 -E "amx_bf16|avx512_bf16" /proc/cpuinfo | sort -u | xargs
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHT_USE_PCH=ON -DHT_BUILD_BENCH=OFF -DHT_BUILD_TESTS=ON \
    -DCMAKE_PREFIX_PATH="$prefix" -DHT_DEPS_DIR="$PWD/$deps" -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" \
    > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j "$(nproc)" --target "$target" > "$out/build.log" 2>&1 || { grep -B2 -A12 "error" "$out/build.log" | head -80; exit 1; }
  "build-gpu/tests/$target" --gtest_filter="$filter" 2>&1 | tee "$out/one.log" | grep -v -E "^\[ +(RUN|OK) +\]" | head -80
}

# Builds test_integration and hybrid_bench against the wheel's LibTorch into build-gpu (any other
# $2, e.g. this machine's build/ for a dry run, is taken as built), then runs the CUDA tests.
build_bench_and_test_cuda() {
  local out=$1 bin=$2
  if [ "$bin" = build-gpu ]; then
    local prefix abi t0=$SECONDS
    prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
    abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHT_USE_PCH=ON -DHT_BUILD_BENCH=ON -DHT_BUILD_TESTS=ON \
      -DCMAKE_PREFIX_PATH="$prefix" -DHT_DEPS_DIR="$PWD/$deps" -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" \
      > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
    cmake --build build-gpu -j "$(nproc)" --target test_integration hybrid_bench > "$out/build.log" 2>&1 ||
      { grep -B2 -A12 "error" "$out/build.log" | head -80; exit 1; }
    echo "built in $((SECONDS - t0)) s"
  fi
  "$bin/tests/test_integration" --gtest_filter='Cuda.*' 2>&1 | tee "$out/cuda_tests.log" |
    grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|Expected|Which is|\(\+0x" | head -40 || true
}

# Learned nowcasting on the GPU: the CUDA tests (nowcast jumps undone bit-exactly, resume inside
# a verification window), then FM-16 plain vs WNN+ judged after period / 4 (the README's
# recommendation) under both protocols, seed after seed until $budget seconds are spent.
nowcast() {
  local out=${OUT:-build-gpu} budget=${2:-240}
  mkdir -p "$out"
  exec > >(tee "$out/gpu-nowcast.log") 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  grep -m1 "model name" /proc/cpuinfo; nproc
  build_bench_and_test_cuda "$out" build-gpu
  local t0=$SECONDS
  mkdir -p build-gpu/nowcast
  for seed in 1 2 3; do
    for protocol in cosine nino; do
      if (( SECONDS - t0 > budget )); then echo "time budget spent: fm16 $protocol seed $seed not run"; continue; fi
      local dir="build-gpu/nowcast/fm16_${protocol}_seed$seed"
      build-gpu/bench/hybrid_bench --out "$dir" --tasks fm16 --seeds 1 --first-seed "$seed" --threads 4 \
        --target best80 --eval-points 40 --protocol "$protocol" --modes plain wnn-span \
        --set run.device=cuda --set data.fashion_mnist_dir="$PWD/$deps/fashion-mnist" --set nowcast.tolerance=0.1 \
        > "$dir.log" 2>&1 || { tail -20 "$dir.log"; continue; }
      grep -E "^fm16 seed|step [0-9]+: k|^  time" "$dir.log"
      # Curves, summaries and logs in one file ($OUT brings back 8 files at most), after each run.
      tar czf "$out/nowcast-runs.tar.gz" -C build-gpu nowcast
    done
  done
}

# Record v2's GPT parts on the GPU (`record [SECONDS]`), which take ~10 h on the 2 CPU cores here:
# the tiny GPT on KJV under both protocols, seeds 1-3, plain vs SNOO vs WNN+ and our own nowcaster
# judged 40 steps after each jump at 10 % tolerance (the README's setting; both compute on the GPU),
# and the 6 x 256 GPT at NiNo's constant rate (2000 steps) with NiNo beside them (NiNo computes on the host:
# priced at hundreds of GPU steps a jump, the budget makes none on the tiny GPT). One process per
# protocol and seed, all at once (the GPU idles between a small model's kernels); each process
# steps its modes side by side, so ratios within a seed share the load. SECONDS caps them all.
# HT_DEVICE=cpu HT_BUILD_DIR=build HT_GPT_STEPS=20 HT_WIDE_STEPS=4 HT_EVAL_POINTS=3 run it here as a dry run;
# HT_RECORD_PARTS="gptwide" HT_WIDE_MODES="plain wnn-late" run a part of it.
record() {
  local out=${OUT:-build-gpu} budget=${2:-330} device=${HT_DEVICE:-cuda} bin=${HT_BUILD_DIR:-build-gpu}
  local gpt_steps=${HT_GPT_STEPS:-3000} wide_steps=${HT_WIDE_STEPS:-2000} evals=${HT_EVAL_POINTS:-30} pids=()
  local parts=${HT_RECORD_PARTS:-gpt gptwide} wide_modes=${HT_WIDE_MODES:-plain wnn-late nino-late own-late} part
  for part in $parts; do
    [[ $part == gpt || $part == gptwide ]] || { echo "HT_RECORD_PARTS: unknown part '$part' (use gpt, gptwide or both)"; exit 2; }
  done
  mkdir -p "$out"
  exec > >(tee "$out/gpu-record.log") 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  grep -m1 "model name" /proc/cpuinfo; nproc; git describe --always --dirty 2>/dev/null || true
  build_bench_and_test_cuda "$out" "$bin"
  local dir="$bin/record" t0=$SECONDS
  rm -rf "$dir" && mkdir -p "$dir"
  local common=(--threads 2 --target best80 --seeds 1 --set run.device="$device" --set data.dataset=text
                --set data.path="$PWD/$deps/kjv.txt" --set nowcast.tolerance=0.1)
  for protocol in nino cosine; do
    [[ " $parts " == *" gpt "* ]] || continue
    for seed in 1 2 3; do
      timeout "$budget" "$bin/bench/hybrid_bench" --out "$dir/gpt_${protocol}_seed$seed" --tasks gpt --protocol "$protocol" \
        --gpt-steps "$gpt_steps" --eval-points "$evals" --first-seed "$seed" "${common[@]}" --set nowcast.verify_after=40 \
        --modes plain snoo wnn-late own-late > "$dir/gpt_${protocol}_seed$seed.log" 2>&1 &
      pids+=($!)
    done
  done
  if [[ " $parts " == *" gptwide "* ]]; then  # as bench/record_v2.sh's gptwide_nino part
    # shellcheck disable=SC2086  # the modes are words
    timeout "$budget" "$bin/bench/hybrid_bench" --out "$dir/gptwide_nino_seed1" --tasks gpt-wide --protocol nino \
      --gpt-wide-steps "$wide_steps" --eval-points 20 --first-seed 1 "${common[@]}" --set nowcast.period=500 \
      --set nowcast.verify_after=40 --modes $wide_modes > "$dir/gptwide_nino_seed1.log" 2>&1 &
    pids+=($!)
  fi
  wait "${pids[@]}" || true  # these only: a bare wait would wait for the log's tee too
  echo "runs took $((SECONDS - t0)) s (cap $budget s each)"
  for log in "$dir"/*.log; do
    echo "== $(basename "$log" .log)"
    grep -E "^gpt|step [0-9]+: (k|not)|^  time|rror|what\(\)" "$log" | head -40 || true
  done
  tar czf "$out/record-runs.tar.gz" -C "$bin" record
}

case "${1:-run}" in
  prepare) prepare ;;
  run) run 1 ;;
  quick) run 0 ;;
  one) one "$2" "$3" ;;
  nowcast) nowcast "$@" ;;
  record) record "$@" ;;
  *) echo "usage: gpu-check.sh prepare|run|quick|nowcast [SECONDS]|record [SECONDS]|one TEST_BINARY GTEST_FILTER"; exit 2 ;;
esac
