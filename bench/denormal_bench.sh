#!/usr/bin/env bash
# Subnormal floats: the README's default job (tiny GPT on KJV) with run.flush_denormal on and off,
# both at once, one thread each, so the machine's load falls on both alike.
# Usage: bench/denormal_bench.sh [steps] [extra key=value ...]   (build first: scripts/build.sh)
# Prints the CPU, ms/step per 200 steps for both, total time and the last validation loss (also to
# $HT_BENCH_OUT/summary.md; the two runs' logs stay beside it, their checkpoints are removed).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-2000}
shift || true
out=${HT_BENCH_OUT:-bench/results/denormal}
mkdir -p "$out"
{
echo "# $(date -u +%FT%TZ) at $(git describe --always --dirty 2>/dev/null || echo unknown);" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, flags:" \
  "$(grep -m1 -o 'amx_bf16\|avx512_bf16' /proc/cpuinfo | sort -u | xargs)"
for flush in true false; do
  rm -rf "$out/run_$flush"
  ./build/hybrid-train train configs/tiny-gpt-kjv.toml run.threads=1 run.log_every=10 "train.steps=$steps" \
    "run.out_dir=$out/run_$flush" checkpoint.every_steps=0 "run.flush_denormal=$flush" "$@" > "$out/flush_$flush.log" 2>&1 &
done
wait
rm -rf "$out/run_true" "$out/run_false"
echo "\$ bench/denormal_bench.sh $steps $*"
python3 - "$out" "$steps" <<'PY'
import re, sys
out, steps = sys.argv[1], int(sys.argv[2])
def read(flush):
    text = open(f"{out}/flush_{flush}.log").read()
    ms = {int(s): float(m) for s, m in re.findall(r"step\s+(\d+)/\d+ \w+\s+loss \S+\s+lr \S+\s+(\d+) ms/step", text)}
    val = re.findall(r"val(?:idation)?[ _]loss[ =:]+([0-9.]+)", text)
    return ms, (val[-1] if val else "?")
on, val_on = read("true")
off, val_off = read("false")
print("| steps | ms/step flush on | ms/step flush off | off / on |")
print("|---|---|---|---|")
for lo in range(0, steps, 200):
    a = [v for s, v in on.items() if lo < s <= lo + 200]
    b = [v for s, v in off.items() if lo < s <= lo + 200]
    if a and b:
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        print(f"| {lo + 1}-{lo + 200} | {ma:.0f} | {mb:.0f} | {mb / ma:.2f}x |")
ta, tb = sum(on.values()) * 10 / 1000, sum(off.values()) * 10 / 1000
print(f"training time (sum of logged ms/step x 10): flush on {ta:.0f} s, off {tb:.0f} s ({tb / ta:.2f}x)")
print(f"last validation loss: flush on {val_on}, off {val_off}")
PY
} 2>&1 | tee "$out/summary.md"
