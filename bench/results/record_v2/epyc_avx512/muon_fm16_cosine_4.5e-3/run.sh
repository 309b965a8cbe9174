#!/bin/bash
# FM-16 under warmup + cosine: Muon at a 4.5e-3 peak (between muon_fm16_cosine_3e-3/, too slow, and
# muon_fm16_cosine/'s 6e-3, which overshoots its minimum) with the lag-corrected average 0.995, on
# every kernel and on the hidden convs only, against plain at its tuned 1e-2 peak. Seeds 1-4, two
# invocations at once (seeds 1-2 beside a 9-minute build of the library).
B=${B:-build/bench/hybrid_bench}   # what ran: a copy of it, built at 8d49add
D=bench/results/record_v2/epyc_avx512/muon_fm16_cosine_4.5e-3
A=train.average_decay=0.995@train.average_lag_correction=1
M=plain@optim.name=muon@optim.muon_precision=bf16
run() { s=$1; echo "# \$ build/bench/hybrid_bench --out $D/seed$s (the options below) --first-seed $s ($(date -u +%F\ %H:%M), 8d49add, $(lscpu | sed -n 's/^Model name: *//p') 2 vCPU, two seeds at once)" > $D/seed$s.log
  $B --out $D/seed$s --tasks fm16 --fm16-steps 10000 --protocol cosine --eval-points 40 --seeds 1 --threads 1 \
   --target best80 --first-seed $s --set data.probe_fraction=0.035 --set optim.lr=0.01 \
   --modes plain $M@$A@optim.lr=0.0045 $M@optim.muon_hidden_only=true@$A@optim.lr=0.0045 >> $D/seed$s.log 2>&1; }
( run 1 & run 2 & wait; run 3 & run 4 & wait )
