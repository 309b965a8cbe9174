#!/bin/bash
# Muon as SNOO's inner optimizer on the tiny GPT under warmup + cosine (3000 steps), against plain
# AdamW at its tuned 3e-3 peak and beside Muon with the weight average 0.99 (gpt_cosine_muon's
# setting): SNOO at its defaults (k 10, alpha 0.3, momentum 0.7) and the tiny GPT's cosine SNOO
# setting (momentum 0.9 until step 100, then 0.7), both on Muon at 3e-3 with the average 0.99.
# Seeds 1-2 as two invocations at once, then seed 3 alone (a Hessian scan on the other core).
# From the repository root; bash bench/record_v2.sh gpt_cosine_muon_snoo runs the same modes.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 8d49add
D=bench/results/record_v2/epyc_avx512/muon_snoo_cosine
M=optim.name=muon@optim.muon_precision=bf16
SET=snoo@lookahead.alpha=0.1@lookahead.momentum=0.9@lookahead.late_step=100@lookahead.late_momentum=0.7@train.average_decay=0.99
run() { s=$1; echo "# \$ $B --out $D/seed$s (the options below) --first-seed $s ($(date -u +%F\ %H:%M), 8d49add, $(lscpu | sed -n 's/^Model name: *//p') 2 vCPU)" > $D/seed$s.log
  $B --out $D/seed$s --tasks gpt --gpt-steps 3000 --protocol cosine --eval-points 30 --seeds 1 --threads 1 \
   --target best80 --first-seed $s --set optim.lr=0.003 \
   --modes plain plain@$M@train.average_decay=0.99 snoo@$M@train.average_decay=0.99 $SET@$M >> $D/seed$s.log 2>&1; }
( run 1 & run 2 & wait ); run 3
