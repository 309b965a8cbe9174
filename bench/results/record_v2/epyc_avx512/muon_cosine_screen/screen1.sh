#!/bin/bash
# Muon screen on the tiny GPT, cosine, plain at 3e-3; $1 = seed
B=/work/runs/hybrid_bench_muon1
s=$1
common="--tasks gpt --seeds 1 --threads 1 --protocol cosine --gpt-steps 3000 --eval-points 30 --target best80 --first-seed $s --set optim.lr=0.003"
( $B --out /work/runs/muon/a_seed$s $common --modes plain plain@optim.name=muon > a_seed$s.log 2>&1 ) &
( $B --out /work/runs/muon/b_seed$s $common --modes plain@optim.name=muon@optim.lr=0.006 plain@optim.name=muon@optim.lr=0.012 > b_seed$s.log 2>&1 ) &
wait
