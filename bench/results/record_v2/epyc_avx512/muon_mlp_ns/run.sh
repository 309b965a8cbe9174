#!/bin/bash
# Muon on every matrix of the Fashion-MNIST MLP with fewer Newton-Schulz iterations (5, 3, 2), with
# the average at 0.99, beside plain and the average alone: NiNo's constant 1e-3, 2000 steps, 3 seeds,
# alone on a quiet machine. Is a cheaper orthogonalization of fc1 the MLP's lever?
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 7181ce3 (15d40d6 changed no code)
D=bench/results/record_v2/epyc_avx512/muon_mlp_ns
M=plain@optim.name=muon@optim.muon_precision=bf16@train.average_decay=0.99
$B --out $D/nino --threads 1 --target best80 --seeds 3 --tasks mlp --protocol nino --mlp-steps 2000 --eval-points 40 \
   --set data.val_batches=-1 --modes plain $M $M@optim.muon_ns_steps=3 $M@optim.muon_ns_steps=2 plain@train.average_decay=0.99 > $D/nino.log 2>&1
