#!/bin/bash
# Muon on FM-16 under warmup + cosine (10k steps), against plain AdamW at its tuned 1e-2 peak and
# beside FM-16's cosine setting of record (NiNo, half the norm change, lag-corrected average 0.995,
# 6e-3) - the fm16_cosine_tuned part's modes plus Muon with the same average on every kernel and
# on the hidden convs only (optim.muon_hidden_only). Seeds 1-4, two invocations at once.
# From the repository root (bash bench/record_v2.sh fm16_cosine_muon runs the same modes, 3 seeds in one invocation).
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 8d49add
D=bench/results/record_v2/epyc_avx512/muon_fm16_cosine
S=nino-span-power@nowcast.tolerance=0.1@nowcast.power_level_states=4@nowcast.last_jump_fraction=0.5@nowcast.jump_norm_scale=0.5
A=train.average_decay=0.995@train.average_lag_correction=1
M=plain@optim.name=muon@optim.muon_precision=bf16
run() { s=$1; echo "# \$ $B --out $D/seed$s (the options below) --first-seed $s ($(date -u +%F\ %H:%M), 8d49add, $(lscpu | sed -n 's/^Model name: *//p') 2 vCPU, two seeds at once)" > $D/seed$s.log
  $B --out $D/seed$s --tasks fm16 --fm16-steps 10000 --protocol cosine --eval-points 40 --seeds 1 --threads 1 \
   --target best80 --first-seed $s --set data.probe_fraction=0.035 --set optim.lr=0.01 \
   --modes plain $S@$A@optim.lr=0.006 $M@$A@optim.lr=0.006 $M@optim.muon_hidden_only=true@$A@optim.lr=0.006 >> $D/seed$s.log 2>&1; }
( run 1 & run 2 & wait; run 3 & run 4 & wait )
