#!/bin/bash
# The nowcasters on the 6 x 256 GPT at its best constant rate of the sweep (1e-3,
# jump_scan/rates/wide_rate_sweep/), against plain at that rate: wide_gpt_nowcasters/ ran them at
# NiNo's 3e-3, far above this width's best. 2000 steps, period 500, jumps judged after 40 steps (as
# there); WNN+ at the record's setting and with k capped at 10 (the scan's k 10 was ahead of no jump
# 100 steps after the jump, k 40 behind) and a 10 % redo budget (one undone jump spends 3 %).
# AMD EPYC (CPU family 26) 2 vCPU, seeds 1 and 2 at once beside the other runs their logs name; each
# run's modes alternate every 10 steps, so its ratios are measured under one load.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at a1ea945
D=bench/results/record_v2/epyc_avx512/wide_gpt_tuned_rate
run() { s=$1; $B --out $D/seed$s --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol nino \
   --gpt-wide-steps 2000 --eval-points 20 --first-seed $s --set optim.lr=0.001 --set nowcast.period=500 \
   --set nowcast.verify_after=40 --modes plain wnn-late wnn-late@nowcast.horizon_max=10@nowcast.redo_budget=0.1 > $D/seed$s.log 2>&1; }
run 1 & run 2 & wait
