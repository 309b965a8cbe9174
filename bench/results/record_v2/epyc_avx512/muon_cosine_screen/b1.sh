#!/bin/bash
B=/work/runs/hybrid_bench_muon1
s=$1
$B --out /work/runs/muon/b_seed$s --tasks gpt --seeds 1 --threads 1 --protocol cosine --gpt-steps 3000 --eval-points 30 --target best80 --first-seed $s --set optim.lr=0.006 --set optim.name=muon --modes plain plain@optim.lr=0.012 > b_seed$s.log 2>&1
