#!/bin/bash
# Why the rate decides, and what width does: how each nowcaster's jump lines up with plain's
# expected 1000-step future (the mean of three futures on other data orders) on three GPTs - the
# byte-level tiny GPT (4 x 128), record_v2's word-level KJV GPT (3 x 64) and the 6 x 256 GPT - at the
# rate of NiNo's protocol / plain's best and at NiNo's LM rate 2e-4 (BENCHMARKS.md 9, "Why the rate
# decides"). One state per scan (step 1000; the 6 x 256 GPT at 3e-3 from step 1600, past its plateau).
# AMD EPYC with AVX-512, 1 thread per scan, three scans at a time on the 2 vCPUs; what ran: copies of
# nowcast-meta built at 31c8f3c and a2d48d6 (the same scan code). Table:
#   python3 bench/scan_alignment.py bench/results/jump_scan/rates/*.log
set -e
M=build/nowcast-meta
R=bench/results/jump_scan/rates
W=$R/work; mkdir -p $W
[ -s $W/kjv_words.bin ] || python3 bench/python/word_tokens.py --kjv $W/kjv_words.bin --vocab 8192
scan() {  # LOG TASK-OPTIONS...: one seed's scan, its log headed by its command
  local log=$1; shift
  local cmd="$M --threads 1 scan $* --runs 1 --recover-steps 100 --models wnn,nino --horizons 10,40 --scales 1
             --oracle-steps 1000 --oracle-futures 3 --trend --work-dir $W/$(basename $log .log)"
  { echo "# \$ $(echo $cmd)   ($(date +%F), $(git rev-parse --short HEAD), $(lscpu | sed -n 's/^Model name: *//p'))"; $cmd; } > $R/$log 2>&1
}
for s in 1 2; do
  scan gpt_tiny_kjv_lr0.003_seed$s.log --task gpt-tiny-kjv --lr 0.003 --first-seed $s --states 6 --at 4 &
  scan gpt_words_kjv_lr0.002_seed$s.log --task gpt-words-kjv --tokens $W/kjv_words.bin --lr 0.002 --first-seed $s --states 6 --at 4 &
  scan gpt_words_kjv_lr0.0002_seed$s.log --task gpt-words-kjv --tokens $W/kjv_words.bin --lr 0.0002 --first-seed $s --states 6 --at 4
  wait
  # ~63 minutes each at 1 thread beside two other scans.
  scan gpt_wide_kjv_lr0.003_seed$s.log --task gpt-wide-kjv --first-seed $s --states 9 --at 7
done
scan gpt_tiny_kjv_lr0.0002_seed1.log --task gpt-tiny-kjv --lr 0.0002 --first-seed 1 --states 6 --at 4 &
scan gpt_wide_kjv_lr0.0002_seed1.log --task gpt-wide-kjv --lr 0.0002 --first-seed 1 --states 6 --at 4
wait
# Plain's constant rate on the 6 x 256 GPT (seed 1, 1000 steps; the record's 3e-3 is in
# record_v2/epyc_avx512/wide_gpt/seed1): where do 2e-4 and 3e-3 stand against its best?
B=build/bench/hybrid_bench
S=$R/wide_rate_sweep
$B --out $S/wide_lr_A --tasks gpt-wide --protocol nino --gpt-wide-steps 1000 --eval-points 10 --seeds 1 --first-seed 1 \
  --threads 1 --set optim.lr=0.0002 --modes plain plain@optim.lr=0.001 > $S/wide_lr_A.log 2>&1 &
$B --out $S/wide_lr_B --tasks gpt-wide --protocol nino --gpt-wide-steps 1000 --eval-points 10 --seeds 1 --first-seed 1 \
  --threads 1 --set optim.lr=0.0006 --modes plain > $S/wide_lr_B.log 2>&1
wait
# The 6 x 256 GPT at the best rate of that sweep, 1e-3 (two futures and WNN+ only, for time).
$M --threads 1 scan --task gpt-wide-kjv --lr 0.001 --runs 1 --first-seed 1 --states 6 --at 4 --recover-steps 100 \
  --models wnn --horizons 10,40 --scales 1 --oracle-steps 1000 --oracle-futures 2 --trend \
  --work-dir $W/gpt_wide_kjv_lr0.001_seed1 > $R/gpt_wide_kjv_lr0.001_seed1.log 2>&1
# Above 1e-3 (2026-12-08, fifteenth session, beside the wide_gpt_tuned_rate/ runs): does the best
# constant rate lie between 1e-3 and 3e-3? 1.5e-3 and 2e-3, seed 1, 1000 steps.
$B --out $S/wide_lr_C --tasks gpt-wide --protocol nino --gpt-wide-steps 1000 --eval-points 10 --seeds 1 --first-seed 1 \
  --threads 1 --set optim.lr=0.0015 --modes plain plain@optim.lr=0.002 > $S/wide_lr_C.log 2>&1
