#!/usr/bin/env bash
# Step-time benchmark of record: our C++ GPT step vs the same model and loop in Python
# (python3-torch), interleaved round by round with the same threads and environment.
# Usage: bench/step_time.sh [rounds]   (build first: scripts/build.sh). Prints JSON lines + ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=${HT_BENCH_OUT:-bench/results/step_time.jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
shapes=("tiny 16 128 20" "gpt2 4 64 6")
for r in $(seq 1 "$rounds"); do
  for shape in "${shapes[@]}"; do
    read -r preset b t steps <<< "$shape"
    /usr/bin/python3 bench/python/gpt_step.py --preset "$preset" --batch "$b" --seq "$t" --steps "$steps" | tee -a "$out"
    ./build/bench/step_time --preset "$preset" --batch "$b" --seq "$t" --steps "$steps" | tee -a "$out"
    HT_GEMM=aten ./build/bench/step_time --preset "$preset" --batch "$b" --seq "$t" --steps "$steps" | tee -a "$out"
    ./build/bench/step_time --preset "$preset" --batch "$b" --seq "$t" --steps "$steps" --optimizer torch --caching false | tee -a "$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for preset in ("tiny", "gpt2"):
    def med(pred):
        v = [r["median_ms"] for r in rows if r["preset"] == preset and pred(r)]
        return statistics.median(v), min(v), max(v)
    py = med(lambda r: r["impl"] == "python")
    ours = med(lambda r: r["impl"] == "cpp" and r["optimizer"] == "fused" and r["gemm"] == "onednn")
    aten = med(lambda r: r["impl"] == "cpp" and r["optimizer"] == "fused" and r["gemm"] == "aten")
    plain = med(lambda r: r["impl"] == "cpp" and r["optimizer"] == "torch")
    print(f"{preset}: python {py[0]:.1f} ms [{py[1]:.1f}-{py[2]:.1f}], "
          f"hybrid-trainer {ours[0]:.1f} ms [{ours[1]:.1f}-{ours[2]:.1f}], "
          f"ours with HT_GEMM=aten {aten[0]:.1f} ms, "
          f"C++ with torch AdamW + malloc {plain[0]:.1f} ms; ratio ours/python {ours[0]/py[0]:.2f} "
          f"(HT_GEMM=aten {aten[0]/py[0]:.2f})")
PY
