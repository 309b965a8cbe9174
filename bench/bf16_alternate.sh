#!/usr/bin/env bash
# bf16 against fp32 step time, alternating the two run by run (steadier on a noisy VM than
# bf16_bench.sh's rounds); "bf16-onednn-alpha" hands GEMM alpha to oneDNN (HT_BF16_ALPHA=onednn).
# Usage: bench/bf16_alternate.sh [rounds]   prints each run's median and the ratios of medians.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4}
out=${HT_BENCH_OUT:-bench/results/bf16_alternate.jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); bf16 flags: $(grep -m1 -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
step() {  # variant preset batch seq steps warmup
  local variant=$1 precision=bf16 env=()
  [ "$variant" = fp32 ] && precision=fp32
  [ "$variant" = bf16-onednn-alpha ] && env=(HT_BF16_ALPHA=onednn)
  env "${env[@]}" ./build/bench/step_time --preset "$2" --batch "$3" --seq "$4" --steps "$5" \
      --warmup "$6" --threads 2 --precision "$precision" | sed "s/^{/{\"variant\": \"$variant\", /" >> "$out"
}
for r in $(seq 1 "$rounds"); do
  for v in fp32 bf16 bf16-onednn-alpha; do step "$v" tiny 16 128 40 3; done
  for v in fp32 bf16; do step "$v" gpt2 4 64 6 1; done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for preset in ("tiny", "gpt2"):
    by = {}
    for r in rows:
        if r["preset"] == preset: by.setdefault(r["variant"], []).append(r["median_ms"])
    f32 = by["fp32"]
    print(f"{preset}: fp32 {[round(x) for x in f32]} ms")
    for v, ms in by.items():
        if v == "fp32": continue
        pair = [round(b / a, 2) for a, b in zip(f32, ms)]
        print(f"  {v}: {[round(x) for x in ms]} ms; / fp32 per round {pair}, "
              f"ratio of medians {statistics.median(ms) / statistics.median(f32):.2f}")
PY
