#!/bin/bash
# What ran (2026-12-07, AMD EPYC with AVX-512, each seed beside another bench): the tiny GPT under
# warmup + cosine, plain AdamW at 3e-3 against Muon + the average and NiNo's jumps on that run.
# Seed 1 beside muon_constant's seed 1, seed 2 beside its seed 8.
B=/work/runs/s6/hybrid_bench   # build/bench/hybrid_bench at aa4e612's parent (b2dd739)
M=plain@optim.name=muon@optim.muon_precision=bf16@train.average_decay=0.99
N=nino-late@optim.name=muon@optim.muon_precision=bf16@train.average_decay=0.99
for s in 1 2; do
  $B --out seed$s --tasks gpt --seeds 1 --threads 1 --protocol cosine --gpt-steps 3000 --eval-points 30 --target best80 --first-seed $s \
     --set optim.lr=0.003 --set nowcast.verify_after=40 --set nowcast.tolerance=0.1 --modes plain $M $N > seed$s.log 2>&1
done
