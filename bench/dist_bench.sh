#!/usr/bin/env bash
# Data-parallel benchmark: 1 process x 2 threads against 2 processes x 1 thread (replicated,
# ZeRO-1 sharded, and without overlap), interleaved, on the tiny GPT and GPT-2 small; then the
# communication hybrid mode's predicted steps skip. Usage: bash bench/dist_bench.sh [--rounds R]
#   [--tiny-steps N] [--gpt2-steps N] [--skip-gpt2]. Writes a log to stdout; figures are medians
#   over steps after the first few (start-up, allocator warm-up) and over rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HT_BINARY:-build/hybrid-train}
rounds=3 tiny_steps=60 gpt2_steps=8 skip_gpt2=0
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --tiny-steps) tiny_steps=$2; shift 2 ;;
    --gpt2-steps) gpt2_steps=$2; shift 2 ;;
    --skip-gpt2) skip_gpt2=1; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/ht-dist-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "# dist_bench $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
     "flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')"
echo "# env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-unset};" \
     "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

lo_tx() { awk '/^ *lo:/ {print $10}' /proc/net/dev; }

# run NAME STEPS SKIP NPROC ARGS...: one run; prints a JSON summary line of its step records.
run() {
  local name=$1 steps=$2 skip=$3 nproc=$4
  shift 4
  local out="$work/$name"
  rm -rf "$out"
  local launch=(train)
  [ "$nproc" -gt 1 ] && launch=(train --nproc "$nproc")
  local tx0 t0 t1
  tx0=$(lo_tx)
  t0=$(date +%s.%N)
  "$bin" "${launch[@]}" run.out_dir="$out" train.steps="$steps" train.eval_every=0 data.val_batches=2 \
    checkpoint.every_steps=0 checkpoint.every_seconds=0 run.log_every=1000 sample.tokens=1 "$@" > "$out.log" 2>&1 ||
    { echo "run $name failed:"; tail -20 "$out.log"; exit 1; }
  t1=$(date +%s.%N)
  local tx=$(( $(lo_tx) - tx0 ))
  python3 - "$out/metrics.jsonl" "$name" "$skip" "$tx" "$t0" "$t1" <<'EOF'
import json, statistics, sys
path, name, skip, tx, t0, t1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
steps = [json.loads(l) for l in open(path) if '"type":"step"' in l]
kept = steps[skip:]
med = lambda xs: statistics.median(xs) if xs else float('nan')
def by(phase):
    ss = [s for s in kept if phase is None or s['phase'] == phase]
    return {'n': len(ss), 'ms': med([s['ms'] for s in ss]),
            'wait_ms': med([s.get('comm_wait_ms', 0.0) for s in ss]),
            'bytes': med([s.get('comm_bytes', 0.0) for s in ss]),
            'items_per_sec': med([s['items_per_sec'] for s in ss]),
            'peak_mib': max([s['peak_bytes'] for s in ss] or [0]) / 2**20}
print(json.dumps({'name': name, 'all': by(None), 'full': by('full'), 'predict': by('predict'),
                  'lo_bytes_per_step': tx / max(1, len(steps)), 'wall_s': t1 - t0, 'steps': len(steps)}))
EOF
  rm -rf "$out"
}

summarize() {  # the JSON lines of one model's runs -> a table of medians over rounds
  python3 - "$@" <<'EOF'
import json, statistics, sys
rows = {}
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        rows.setdefault(r['name'], []).append(r)
med = statistics.median
base = None
print(f"{'variant':<28}{'ms/step':>9}{'tok/s':>9}{'vs 1x2':>8}{'comm wait':>11}{'share':>7}{'sent/step':>12}{'lo/step':>12}{'peak/rank':>11}")
for name, rs in rows.items():
    ms = med([r['all']['ms'] for r in rs]); tok = med([r['all']['items_per_sec'] for r in rs])
    wait = med([r['all']['wait_ms'] for r in rs]); sent = med([r['all']['bytes'] for r in rs])
    lo = med([r['lo_bytes_per_step'] for r in rs]); peak = med([r['all']['peak_mib'] for r in rs])
    if base is None: base = tok
    print(f"{name:<28}{ms:>9.1f}{tok:>9.0f}{tok/base:>7.2f}x{wait:>9.1f}ms{100*wait/ms:>6.1f}%{sent/2**20:>9.2f}MiB{lo/2**20:>9.2f}MiB{peak:>8.1f}MiB")
    print(f"{'':<28}per round ms/step: " + ", ".join(f"{r['all']['ms']:.1f}" for r in rs))
EOF
}

bench_model() {  # label steps skip args...: the four variants, interleaved, `rounds` times
  local label=$1 steps=$2 skip=$3
  shift 3
  local log="$work/$label.jsonl"
  : > "$log"
  for r in $(seq 1 "$rounds"); do
    run "1proc-x-2threads" "$steps" "$skip" 1 run.threads=2 "$@" >> "$log"
    run "2proc-x-1thread" "$steps" "$skip" 2 run.threads=1 "$@" >> "$log"
    run "2proc-x-1thread-zero1" "$steps" "$skip" 2 run.threads=1 dist.shard_optimizer=true "$@" >> "$log"
    run "2proc-x-1thread-no-overlap" "$steps" "$skip" 2 run.threads=1 dist.overlap=false "$@" >> "$log"
  done
  echo
  echo "## $label: $* ($steps steps a run, the first $skip not counted; $rounds rounds, interleaved)"
  summarize "$log"
}

bench_model "tiny GPT" "$tiny_steps" 10 model.preset=tiny data.batch_size=16 data.context=128
if [ "$skip_gpt2" = 0 ]; then
  bench_model "GPT-2 small" "$gpt2_steps" 3 model.preset=gpt2 data.batch_size=4 data.context=64
fi

echo
echo "## hybrid mode in DP, tiny GPT, 2 processes x 1 thread: what predicted steps send"
hyb="$work/hybrid.jsonl"
: > "$hyb"
run "hybrid-2proc" 300 10 2 run.threads=1 model.preset=tiny data.batch_size=16 data.context=128 run.mode=hybrid \
  hybrid.pay_check_clock=steps hybrid.warmup_steps=20 hybrid.full_steps=8 hybrid.correct_steps=2 \
  hybrid.min_predict_steps=4 hybrid.max_predict_steps=8 hybrid.verify_every=4 hybrid.probe_batches=1 >> "$hyb"
python3 - "$hyb" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
for phase in ('full', 'predict'):
    p = r[phase]
    print(f"{phase:<8} steps {p['n']:>4}  median {p['ms']:7.1f} ms/step  comm wait {p['wait_ms']:6.2f} ms  sent {p['bytes']:>10.0f} B/step")
f, p = r['full'], r['predict']
if p['n']:
    print(f"a predicted step sends {p['bytes']:.0f} B instead of {f['bytes']:.0f} B and waits {p['wait_ms']:.2f} ms "
          f"instead of {f['wait_ms']:.2f} ms for communication")
EOF
echo
echo "## the planner's figures for one rank (compare peak/rank above: rank 0's measured peak)"
"$bin" plan model.preset=tiny data.batch_size=16 data.context=128 --nproc 2 | sed -n '/per rank/,/sharded:/p'
[ "$skip_gpt2" = 0 ] && "$bin" plan model.preset=gpt2 data.batch_size=4 data.context=64 --nproc 2 | sed -n '/per rank/,/sharded:/p'
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
