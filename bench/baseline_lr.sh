#!/usr/bin/env bash
# Is plain mode's learning rate in the benchmark of record tuned? Runs plain mode of each task over a
# grid of learning rates (3 seeds each by default) and prints the median and per-seed final val loss.
# Usage: bench/baseline_lr.sh [seeds] [task:lr,lr,... ...]   (build first: scripts/build.sh)
#   e.g. bench/baseline_lr.sh 3 mlp:0.003,0.005 gpt:0.008
# BASELINE_LR_ARGS adds hybrid_bench options, e.g. the record v2 cosine protocol's length:
#   BASELINE_LR_ARGS="--protocol cosine --gpt-steps 3000 --threads 1" bench/baseline_lr.sh 3 gpt:0.002,0.003,0.004
# (the defaults are the v1 record's lengths, where its rates were tuned; at 3000 steps the tiny
# GPT's best peak is ~3e-3, not v1's 8e-3: BENCHMARKS.md 9).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-3}
shift || true
grids=("$@")
if [ ${#grids[@]} -eq 0 ]; then
  grids=(mlp:0.001,0.002,0.003,0.004,0.005,0.006,0.008 gpt:0.0015,0.003,0.006,0.008,0.01,0.012,0.024
         cnn:0.001,0.002,0.004,0.008,0.012,0.016,0.024)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for grid in "${grids[@]}"; do
  if [[ ! $grid =~ ^[a-z][a-z0-9-]*:[0-9.,e-]+$ ]]; then
    echo "baseline_lr.sh: bad grid '$grid': write task:lr,lr,... (e.g. mlp:0.002,0.004)" >&2
    exit 2
  fi
  task=${grid%%:*}
  IFS=, read -r -a lrs <<<"${grid#*:}"
  for lr in "${lrs[@]}"; do
    # shellcheck disable=SC2086  # BASELINE_LR_ARGS is a list of options
    log=$(./build/bench/hybrid_bench --tasks "$task" --modes plain --seeds "$seeds" --out "$out" \
            ${BASELINE_LR_ARGS:-} --set "optim.lr=$lr")
    # Per-seed finals too: a median hides the one seed in three that diverges at the edge of stability.
    finals=$(sed -n 's/.* final \([0-9.na]*\) in .*/\1/p' <<<"$log" | paste -sd' ')
    line=$(grep '^== ' <<<"$log")
    echo "$task lr $lr: ${line#*reached in } (seeds: $finals)"
  done
done
