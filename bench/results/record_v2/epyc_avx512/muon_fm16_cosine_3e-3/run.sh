#!/bin/bash
# FM-16 under warmup + cosine: Muon at a 3e-3 peak (half fm16_cosine_muon's 6e-3) with the
# lag-corrected average 0.995, on every kernel and on the hidden convs only, against plain at its
# tuned 1e-2 peak. Does a lower rate stop Muon's late rise? Seeds 1-2, one invocation at a time (seeds 3-4 stopped: the screen had its answer).
B=${B:-build/bench/hybrid_bench}   # what ran: a copy of it, built at 8d49add
D=bench/results/record_v2/epyc_avx512/muon_fm16_cosine_3e-3
A=train.average_decay=0.995@train.average_lag_correction=1
M=plain@optim.name=muon@optim.muon_precision=bf16
for s in ${SEEDS:-1 2}; do
  echo "# \$ $B --out $D/seed$s (the options below) --first-seed $s ($(date -u +%F\ %H:%M), 8d49add, $(lscpu | sed -n 's/^Model name: *//p') 2 vCPU, beside a Hessian scan on the other core)" > $D/seed$s.log
  $B --out $D/seed$s --tasks fm16 --fm16-steps 10000 --protocol cosine --eval-points 40 --seeds 1 --threads 1 \
   --target best80 --first-seed $s --set data.probe_fraction=0.035 --set optim.lr=0.01 \
   --modes plain $M@$A@optim.lr=0.003 $M@optim.muon_hidden_only=true@$A@optim.lr=0.003 >> $D/seed$s.log 2>&1
done
