#!/bin/bash
# Muon on the Fashion-MNIST MLP (784-512-256-10), both protocols, 3 seeds, beside plain AdamW and the
# average alone: NiNo's constant 1e-3 (2000 steps) and warmup + cosine at plain's tuned 1e-3 (3000).
B=build/bench/hybrid_bench   # what ran: a copy of it, built at ee4fc20
M=plain@optim.name=muon@optim.muon_precision=bf16
modes="plain $M@train.average_decay=0.99 $M plain@train.average_decay=0.99 $M@train.average_decay=0.99@optim.lr=0.003"
$B --out bench/results/record_v2/epyc_avx512/muon_mlp/nino --threads 1 --target best80 --seeds 3 --tasks mlp --protocol nino --mlp-steps 2000 --eval-points 40 \
   --set data.val_batches=-1 --modes $modes > bench/results/record_v2/epyc_avx512/muon_mlp/nino.log 2>&1 &
$B --out bench/results/record_v2/epyc_avx512/muon_mlp/cosine --threads 1 --target best80 --seeds 3 --tasks mlp --protocol cosine --mlp-steps 3000 --eval-points 40 \
   --set data.val_batches=-1 --set optim.lr=0.001 --modes $modes > bench/results/record_v2/epyc_avx512/muon_mlp/cosine.log 2>&1 &
wait
