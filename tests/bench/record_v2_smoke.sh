#!/usr/bin/env bash
# The benchmark of record v2's one command (bench/record_v2.sh), every part for a few dozen steps:
# each part must end with a summary row for every mode it names, a PNG per task, and jumps made.
set -euo pipefail
src=$1 build=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
if ! HT_BUILD_DIR=$build HT_BENCH_OUT=$out RECORD_V2_SMOKE=1 RECORD_V2_JOBS=2 bash "$src/bench/record_v2.sh" > "$out/all.log" 2>&1; then
  tail -40 "$out/all.log"
  for log in "$out"/*/log; do echo "== $log"; tail -5 "$log"; done
  echo "record_v2 smoke: the script failed"
  exit 1
fi
# Every part the command runs by default (its own list, so a new part is checked the day it is added).
mapfile -t parts < <(bash "$src/bench/record_v2.sh" --list)
for part in "${parts[@]}"; do
  dir=$out/$part
  [ -s "$dir/log" ] || { echo "record_v2 smoke: $part wrote no log"; exit 1; }
  # The modes its hybrid_bench line named, each with a summary row.
  modes=$(grep -m1 '^\$ ' "$dir/log" | sed 's/.*--modes //; s/ --.*//')
  for mode in $modes; do
    grep -q ",$mode,1," "$dir/hybrid_summary.csv" || { echo "record_v2 smoke: $part has no summary row for $mode"; exit 1; }
  done
  ls "$dir"/hybrid_*.png > /dev/null 2>&1 || { echo "record_v2 smoke: $part drew no plot"; exit 1; }
  # Nowcasting modes recorded states and jumped (kept or undone) in every part that has them.
  if grep -q "nowcast (" "$dir/log" && ! grep -Eq "nowcast \([a-z-]+\): [0-9]+ steps, [1-9][0-9]* jumps" "$dir/log"; then
    echo "record_v2 smoke: no nowcasting mode of $part jumped"
    exit 1
  fi
done
echo "record_v2 smoke: ${#parts[@]} parts ran, every mode summarised and plotted"
