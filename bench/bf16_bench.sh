#!/usr/bin/env bash
# bf16 mixed precision, step time and peak memory: our fp32 and bf16 GPT steps against Python's
# fp32 and torch.autocast("cpu", dtype=torch.bfloat16), interleaved round by round, same threads.
# Usage: bench/bf16_bench.sh [rounds] [shapes...]   shapes: tiny, gpt2-64, gpt2-1024 (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
shift || true
wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=(tiny gpt2-64 gpt2-1024)
out=${HT_BENCH_OUT:-bench/results/bf16_step_time.jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); bf16 flags: $(grep -m1 -o -w -E 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# name preset batch seq steps warmup
declare -A shapes=([tiny]="tiny 16 128 20 2" [gpt2-64]="gpt2 4 64 4 1" [gpt2-1024]="gpt2 4 1024 2 1")
for r in $(seq 1 "$rounds"); do
  for name in "${wanted[@]}"; do
    read -r preset b t steps warm <<< "${shapes[$name]}"
    common=(--preset "$preset" --batch "$b" --seq "$t" --steps "$steps" --warmup "$warm")
    /usr/bin/python3 bench/python/gpt_step.py "${common[@]}" | tee -a "$out"
    /usr/bin/python3 bench/python/gpt_step.py "${common[@]}" --autocast | tee -a "$out"
    ./build/bench/step_time "${common[@]}" --precision fp32 | tee -a "$out"
    ./build/bench/step_time "${common[@]}" --precision bf16 | tee -a "$out"
    if [ "$name" = gpt2-1024 ]; then  # peak memory with flash attention too
      ./build/bench/step_time "${common[@]}" --precision fp32 --attention flash | tee -a "$out"
      ./build/bench/step_time "${common[@]}" --precision bf16 --attention flash | tee -a "$out"
    fi
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(pred, key="median_ms"):
    v = [r[key] for r in rows if pred(r)]
    return (statistics.median(v), min(v), max(v)) if v else None
for preset, seq in sorted({(r["preset"], r["seq"]) for r in rows}):
    same = lambda r: r["preset"] == preset and r["seq"] == seq
    py = med(lambda r: same(r) and r["impl"] == "python" and r["precision"] == "fp32")
    ac = med(lambda r: same(r) and r["impl"] == "python" and r["precision"] == "autocast-bf16")
    f32 = med(lambda r: same(r) and r["impl"] == "cpp" and r["precision"] == "fp32" and r["attention"] == "naive")
    b16 = med(lambda r: same(r) and r["impl"] == "cpp" and r["precision"] == "bf16" and r["attention"] == "naive")
    print(f"{preset} T{seq}: python fp32 {py[0]:.0f} ms [{py[1]:.0f}-{py[2]:.0f}], autocast bf16 {ac[0]:.0f} ms "
          f"[{ac[1]:.0f}-{ac[2]:.0f}]; ours fp32 {f32[0]:.0f} ms [{f32[1]:.0f}-{f32[2]:.0f}], bf16 {b16[0]:.0f} ms "
          f"[{b16[1]:.0f}-{b16[2]:.0f}]; bf16/fp32 {b16[0]/f32[0]:.2f}, bf16/autocast {b16[0]/ac[0]:.2f}")
    cpu = {k: med(p, "cpu_ms")[0] for k, p in (
        ("py", lambda r: same(r) and r["impl"] == "python" and r["precision"] == "fp32"),
        ("ac", lambda r: same(r) and r["impl"] == "python" and r["precision"] == "autocast-bf16"),
        ("f32", lambda r: same(r) and r["impl"] == "cpp" and r["precision"] == "fp32" and r["attention"] == "naive"),
        ("b16", lambda r: same(r) and r["impl"] == "cpp" and r["precision"] == "bf16" and r["attention"] == "naive"))}
    print(f"  CPU time per step (all threads): python fp32 {cpu['py']:.0f} ms, autocast {cpu['ac']:.0f} ms; ours fp32 "
          f"{cpu['f32']:.0f} ms, bf16 {cpu['b16']:.0f} ms; bf16/fp32 {cpu['b16']/cpu['f32']:.2f}, "
          f"bf16/autocast {cpu['b16']/cpu['ac']:.2f}")
    for att in ("naive", "flash"):
        pk = {p: [r["peak_mib"] for r in rows if same(r) and r["impl"] == "cpp" and r["precision"] == p
                  and r["attention"] == att] for p in ("fp32", "bf16")}
        if pk["fp32"] and pk["bf16"]:
            print(f"  peak tensor memory ({att}): fp32 {max(pk['fp32']):.0f} MiB, bf16 {max(pk['bf16']):.0f} MiB, "
                  f"ratio {max(pk['bf16'])/max(pk['fp32']):.2f}")
PY
