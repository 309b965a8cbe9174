#!/bin/bash
# What ran (2026-12-07): hybrid_bench built at b2dd739, `run.sh "2 3" "4 5" "6 7"`; seeds 1 and 8 with the same modes, each beside a muon_cosine_nino seed.
# NiNo's constant 3e-3 on the tiny GPT, two seeds at once: plain AdamW, plain+warmup300+avg (the control), Muon+avg.
B=/work/runs/s6/hybrid_bench
M=plain@optim.name=muon@optim.muon_precision=bf16@train.average_decay=0.99
run() { s=$1; $B --out /work/runs/s6/B_seed$s --tasks gpt --seeds 1 --threads 1 --protocol nino --gpt-steps 3000 --eval-points 30 --target best80 --first-seed $s \
   --modes plain plain@schedule.warmup_steps=300@train.average_decay=0.99 $M > /work/runs/s6/B_seed$s.log 2>&1; }
for pair in "$@"; do set -- $pair; run $1 & run $2 & wait; done
