#!/bin/bash
# The cell: seeds 1-8, two benches at once on a quiet machine: plain 3e-3, Muon (bf16 NS) 3e-3 with the average 0.99, Muon alone
B=/work/runs/hybrid_bench_muon2
M=plain@optim.name=muon@optim.muon_precision=bf16
run() { s=$1; $B --out /work/runs/muon/cell_seed$s --tasks gpt --seeds 1 --threads 1 --protocol cosine --gpt-steps 3000 --eval-points 30 --target best80 --first-seed $s --set optim.lr=0.003 \
     --modes plain $M@train.average_decay=0.99 $M > cell_seed$s.log 2>&1; }
for pair in "1 2" "3 4" "5 6" "7 8"; do
  set -- $pair
  run $1 & run $2 & wait
done
