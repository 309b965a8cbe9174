#!/usr/bin/env bash
# Benchmark of record for hybrid training, in one command: runs bench/hybrid_bench (plain vs
# hybrid vs Lookahead vs SNOO vs plain with a weight average, 3 seeds, 3 tasks) and draws the plots.
# Build first: scripts/build.sh.
# Usage: bench/hybrid_bench.sh [extra hybrid_bench flags, e.g. --seeds 5 --set hybrid.predictor=dmd]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${HT_BENCH_OUT:-bench/results}
mkdir -p "$out"
# The BLAS kernel decides the rounding, so it decides the MLP's and the CNN's trajectories
# (OPENBLAS_CORETYPE=Haswell vs unset changes their finals in the 3rd digit): the log says which.
{
  echo "# $(date -u +%F) at $(git describe --always --dirty 2>/dev/null || echo unknown);" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs;" \
    "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-unset}"
  ./build/bench/hybrid_bench --out "$out" "$@"
} | tee "$out/hybrid_bench.log"
bash bench/plot_hybrid.sh "$out"
