#!/bin/bash
# Muon with the average on the 6 x 256 GPT (its setting of muon_wide_gpt/: AdamW's task rate 3e-3,
# bf16 Newton-Schulz, average 0.99) against plain AdamW at this width's best constant rate of the
# sweep, 1e-3 (jump_scan/rates/wide_rate_sweep/), instead of muon_wide_gpt/'s plain at 3e-3, which
# is far above it. 2000 steps, the record's target (plain's best in 80 % of its budget).
# AMD EPYC (CPU family 26) 2 vCPU, beside the other runs each log names; the modes of one run
# alternate every 10 steps, so its ratio is measured under one load.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at a1ea945
D=bench/results/record_v2/epyc_avx512/muon_wide_gpt_tuned_plain
run() { s=$1; $B --out $D/seed$s --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol nino \
   --gpt-wide-steps 2000 --eval-points 20 --first-seed $s --set optim.lr=0.001 \
   --modes plain plain@optim.name=muon@optim.lr=0.003@optim.muon_precision=bf16@train.average_decay=0.99 > $D/seed$s.log 2>&1; }
run 1 & run 2 & wait
run 3   # seed 3 began when seed 1 ended, beside seed 2
