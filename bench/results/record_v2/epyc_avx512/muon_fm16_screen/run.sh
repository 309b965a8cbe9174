#!/bin/bash
# After r4.sh: FM-16 at NiNo's constant 6e-3, seed $1: does NiNo's setting stack on Muon?
# F: plain AdamW, NiNo's setting (AdamW), Muon 6e-3, NiNo's setting on Muon 6e-3.  G: plain, Muon 3e-3, Muon 1.2e-2.
while pgrep -f "r4.sh|rB.sh" > /dev/null; do sleep 20; done
B=/work/runs/s6/hybrid_bench
S=nino-span-power@nowcast.tolerance=0.1@nowcast.power_level_states=4@nowcast.last_jump_fraction=0.5@nowcast.jump_norm_scale=0.25
for s in "$@"; do
common="--tasks fm16 --fm16-steps 10000 --protocol nino --eval-points 40 --seeds 1 --threads 1 --target best80 --first-seed $s --set data.probe_fraction=0.035"
( $B --out /work/runs/s6/F_seed$s $common --modes plain $S plain@optim.name=muon $S@optim.name=muon > F_seed$s.log 2>&1 ) &
( $B --out /work/runs/s6/G_seed$s $common --modes plain plain@optim.name=muon@optim.lr=0.003 plain@optim.name=muon@optim.lr=0.012 > G_seed$s.log 2>&1 ) &
wait
done
# Seeds 2-3 (2026-12-07, hybrid_bench built at aa4e612), beside muon_constant_alone/:
# for s in 2 3; do $B --out F_seed$s --tasks fm16 --fm16-steps 10000 --protocol nino --eval-points 40 --seeds 1 --threads 1 \
#   --target best80 --first-seed $s --set data.probe_fraction=0.035 --modes plain $S plain@optim.name=muon; done
