#!/bin/bash
# Round 1: seeds $@, one bench each, two at once: plain 3e-3, Muon (bf16 NS) at 3e-3, with the average, at 2e-3
B=/work/runs/hybrid_bench_muon2
M=plain@optim.name=muon@optim.muon_precision=bf16
for s in "$@"; do
  ( $B --out /work/runs/muon/r1_seed$s --tasks gpt --seeds 1 --threads 1 --protocol cosine --gpt-steps 3000 --eval-points 30 --target best80 --first-seed $s --set optim.lr=0.003 \
     --modes plain $M $M@train.average_decay=0.99 $M@optim.lr=0.002 > r1_seed$s.log 2>&1 ) &
done
wait
