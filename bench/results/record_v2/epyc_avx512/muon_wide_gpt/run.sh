#!/bin/bash
# The 6 x 256 GPT at NiNo's constant 3e-3, 2000 steps (as wide_gpt_setting/): plain AdamW, Muon + the
# average 0.99, and the warmup control (300 steps + the average); seeds 1 and 3 at once.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at ee4fc20
M=plain@optim.name=muon@optim.muon_precision=bf16@train.average_decay=0.99
run() { s=$1; $B --out bench/results/record_v2/epyc_avx512/muon_wide_gpt/seed$s --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol nino --gpt-wide-steps 2000 \
   --eval-points 20 --first-seed $s --modes plain $M plain@schedule.warmup_steps=300@train.average_decay=0.99 > bench/results/record_v2/epyc_avx512/muon_wide_gpt/seed$s.log 2>&1; }
run 1 & run 3 & wait
# Seed 2, a later session (469d6df's binary, the Muon path unchanged since ee4fc20), beside the three
# wide_gpt_cosine_nowcasters/ seeds:
run 2
