#!/bin/bash
# Muon on the Fashion-MNIST MLP with Jordan's recipe (optim.muon_hidden_only: fc1 and the head fc3
# take AdamW's step, only fc2 [256, 512] is orthogonalized), both protocols, 3 seeds, beside plain
# AdamW, Muon on every matrix (muon_mlp/'s mode) and the average alone; as muon_mlp/run.sh. Ran while
# the three wide-GPT benches of wide_gpt_nowcasters/ held both vCPUs (each run's modes alternate
# every 10 steps, so its ratios are measured under one load).
B=build/bench/hybrid_bench   # what ran: a copy of it, built from 372c243 + optim.muon_hidden_only
D=bench/results/record_v2/epyc_avx512/muon_mlp_hidden
M=plain@optim.name=muon@optim.muon_precision=bf16
H=$M@optim.muon_hidden_only=true
modes="plain $M@train.average_decay=0.99 $H@train.average_decay=0.99 $H plain@train.average_decay=0.99"
$B --out $D/nino --threads 1 --target best80 --seeds 3 --tasks mlp --protocol nino --mlp-steps 2000 --eval-points 40 \
   --set data.val_batches=-1 --modes $modes > $D/nino.log 2>&1
$B --out $D/cosine --threads 1 --target best80 --seeds 3 --tasks mlp --protocol cosine --mlp-steps 3000 --eval-points 40 \
   --set data.val_batches=-1 --set optim.lr=0.001 --modes $modes > $D/cosine.log 2>&1
