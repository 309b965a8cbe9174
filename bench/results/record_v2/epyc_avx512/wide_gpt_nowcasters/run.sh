#!/bin/bash
# The nowcasters on the 6 x 256 GPT at NiNo's constant 3e-3, 2000 steps, period 500, jumps judged
# after 40 steps (as record_v2's gptwide_nino part), seeds 1-3 at once on the 2-vCPU machine (a
# build and the muon_mlp_hidden/ runs beside them for their first ~50 min; each run's modes alternate every 10 steps, so its
# ratios are measured under one load). NiNo with a 6 % redo budget: at the default 3 % (60 steps)
# its ~58-step prediction and 40-step window never fit, so it would make no jump.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 372c243
D=bench/results/record_v2/epyc_avx512/wide_gpt_nowcasters
run() { s=$1; $B --out $D/seed$s --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol nino \
   --gpt-wide-steps 2000 --eval-points 20 --first-seed $s --set nowcast.period=500 --set nowcast.verify_after=40 \
   --modes plain wnn-late own-late nino-late@nowcast.redo_budget=0.06 > $D/seed$s.log 2>&1; }
run 2 & run 3 & run 1 & wait   # seed 1 started 3 minutes after the other two
