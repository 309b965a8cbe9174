#!/bin/bash
# The nowcasters on the 6 x 256 GPT under warmup + cosine at the tiny GPT's tuned 3e-3 peak (as record_v2's
# gptwide_cosine_nowcast part): 2000 steps, period 500, jumps judged after 40 steps at the record's 10 %
# tolerance, NiNo with a 6 % redo budget (at the default 3 % its prediction and window never fit).
# Seeds 1-3 at once on the 2-vCPU machine, with edits and builds beside them; each run's modes
# alternate every 10 steps, so its ratios are measured under one load.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 469d6df
D=bench/results/record_v2/epyc_avx512/wide_gpt_cosine_nowcasters
run() { s=$1; $B --out $D/seed$s --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol cosine \
   --gpt-wide-steps 2000 --eval-points 20 --first-seed $s --set optim.lr=0.003 --set nowcast.tolerance=0.1 \
   --set nowcast.period=500 --set nowcast.verify_after=40 \
   --modes plain wnn-late own-late nino-late@nowcast.redo_budget=0.06 > $D/seed$s.log 2>&1; }
run 1 & run 2 & run 3 & wait
