#!/usr/bin/env bash
# Is plain mode's learning rate in the benchmark of record tuned? Runs plain mode of each task at
# half, once, twice and four times its learning rate (the GPT also 8x; 3 seeds each) and prints the median final val loss.
# Usage: bench/baseline_lr.sh [seeds]   (build first: scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for spec in "mlp 0.001 0.002 0.004 0.008" "gpt 0.0015 0.003 0.006 0.012 0.024"; do
  read -r task lrs <<<"$spec"
  for lr in $lrs; do
    line=$(./build/bench/hybrid_bench --tasks "$task" --modes plain --seeds "$seeds" --out "$out" \
             --set "optim.lr=$lr" | grep '^== ')
    echo "$task lr $lr: ${line#*reached in }"
  done
done
