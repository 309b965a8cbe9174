#!/bin/bash
# Muon on FM-16 at NiNo's constant 6e-3 (10k steps) with Jordan's recipe (optim.muon_hidden_only:
# conv1 and the head fc take AdamW's step) beside Muon on every kernel (fp32 iterations, as in
# muon_fm16_screen/) and plain, seeds 1-3 as three invocations at once on the 2-vCPU machine.
# Does leaving the input layer and head to AdamW stop Muon overfitting this small conv net?
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 7181ce3 (15d40d6 changed no code)
D=bench/results/record_v2/epyc_avx512/muon_fm16_hidden
run() { s=$1; $B --out $D/seed$s --tasks fm16 --fm16-steps 10000 --protocol nino --eval-points 40 --seeds 1 --threads 1 \
   --target best80 --first-seed $s --set data.probe_fraction=0.035 \
   --modes plain plain@optim.name=muon plain@optim.name=muon@optim.muon_hidden_only=true > $D/seed$s.log 2>&1; }
run 1 & run 2 & run 3 & wait
