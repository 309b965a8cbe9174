#!/bin/bash
# The 6 x 256 GPT under warmup + cosine at the tiny GPT's tuned 3e-3 peak (as wide_gpt_cosine/),
# 2000 steps: plain AdamW, Muon (bf16 iterations) at the same rate with the average 0.99, and
# Muon alone (a control), as record_v2's gptwide_cosine_muon part (gpt_cosine_muon on the tiny GPT).
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 262ff14
D=bench/results/record_v2/epyc_avx512/muon_wide_gpt_cosine
M=plain@optim.name=muon@optim.muon_precision=bf16
run() { s=$1; $B --out $D/seed$s --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol cosine \
   --gpt-wide-steps 2000 --eval-points 20 --first-seed $s --set optim.lr=0.003 \
   --modes plain $M@train.average_decay=0.99 $M > $D/seed$s.log 2>&1; }
run 1   # beside wide_gpt_cosine_wnn_tolerance/, each run on its own core
run 2 & run 3 & wait   # then these two, each on its own core (a few short test runs beside them)
