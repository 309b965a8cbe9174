#!/usr/bin/env bash
# Plots validation loss vs training seconds for every mode, one PNG per task, from the CSV that
# bench/hybrid_bench writes (the first seed's curves; the summary CSV has all seeds). Needs gnuplot.
set -euo pipefail
dir=${1:-bench/results}
label=${2:-}  # e.g. the protocol, put in each title
for task in $(tail -n +2 "$dir/hybrid_curves.csv" | cut -d, -f1 | sort -u); do
  modes=$(tail -n +2 "$dir/hybrid_curves.csv" | awk -F, -v t="$task" '$1==t {print $2}' | awk '!seen[$0]++')
  # The first seed run (1 unless hybrid_bench ran with --first-seed).
  seed=$(tail -n +2 "$dir/hybrid_curves.csv" | awk -F, -v t="$task" '$1==t {print $3}' | sort -n | head -1)
  plot=""
  for mode in $modes; do
    awk -F, -v t="$task" -v m="$mode" -v s="$seed" '$1==t && $2==m && $3==s && $4>0 {print $5, $6}' "$dir/hybrid_curves.csv" > "$dir/.$task-$mode.dat"
    # Long mode names (base@nowcast.key=value@...) are shortened to "base key=value ...".
    title=$(printf '%s' "$mode" | sed -e 's/@nowcast\./@/g' -e 's/@/ /g')
    plot="$plot${plot:+, }\"$dir/.$task-$mode.dat\" with linespoints title \"$title\""
  done
  gnuplot <<GP
set terminal pngcairo noenhanced size 1000,600
set output "$dir/hybrid_$task.png"
set title "$task${label:+ ($label)}: validation loss vs training wall-clock, seed $seed (untrained point left out)"
set xlabel "seconds of training"
set ylabel "validation loss"
set key below left Left reverse font ",9"
set grid
plot $plot
GP
  rm -f "$dir"/.$task-*.dat
  echo "wrote $dir/hybrid_$task.png"
done
