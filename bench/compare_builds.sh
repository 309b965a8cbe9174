#!/usr/bin/env bash
# Two builds of hybrid-trainer side by side, interleaved round by round: GPT step time, loss and
# tensor peak (bench/step_time), and a short CLI training run (steps/s, validation loss, peak).
# Usage: bench/compare_builds.sh OLD_BUILD_DIR NEW_BUILD_DIR [rounds]   e.g. before/after a refactor.
set -euo pipefail
old=${1:?old build dir}; new=${2:?new build dir}; rounds=${3:-3}
cd "$(dirname "$0")/.."
out=${HT_BENCH_OUT:-bench/results/compare_builds.log}
mkdir -p "$(dirname "$out")"
{
  echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# old: $old  new: $new"
  for r in $(seq 1 "$rounds"); do
    for which in old new; do
      dir=$old; [ "$which" = new ] && dir=$new
      for shape in "tiny 16 128 20" "gpt2 4 64 6"; do
        read -r preset b t steps <<< "$shape"
        echo "$which round $r $("$dir/bench/step_time" --preset "$preset" --batch "$b" --seq "$t" --steps "$steps")"
      done
      run=$(mktemp -d)
      text=$("$dir/hybrid-train" train configs/tiny-gpt-kjv.toml run.out_dir="$run" train.steps=100 train.eval_every=0 \
             run.threads=2 data.val_batches=4 checkpoint.every_steps=0 checkpoint.every_seconds=0 sample.tokens=0 2>&1 || true)
      rm -rf "$run"
      rate=$(grep -o '([0-9.]* steps/s)' <<< "$text" | tr -d '()')
      loss=$(grep -o 'validation loss [0-9.]*' <<< "$text" | head -1)
      peak=$(grep -o 'peak [0-9.]* MiB of tensors' <<< "$text" | head -1)
      echo "$which round $r train tiny 100 steps: $rate, $loss, $peak"
    done
  done
} | tee "$out"
