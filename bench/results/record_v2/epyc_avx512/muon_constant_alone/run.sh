#!/bin/bash
# What ran (2026-12-07): hybrid_bench built at aa4e612; the FM-16 half wrote muon_fm16_screen/F_seed2-3.
# Muon alone at NiNo's constant 3e-3 on the tiny GPT (seeds 1, 2), beside FM-16 Muon screens (seeds 2, 3).
B=/work/main/build/bench/hybrid_bench
S=nino-span-power@nowcast.tolerance=0.1@nowcast.power_level_states=4@nowcast.last_jump_fraction=0.5@nowcast.jump_norm_scale=0.25
( for s in 1 2; do $B --out /work/runs/s6/H_seed$s --tasks gpt --seeds 1 --threads 1 --protocol nino --gpt-steps 3000 --eval-points 30 --target best80 --first-seed $s \
   --modes plain plain@optim.name=muon@optim.muon_precision=bf16 > H_seed$s.log 2>&1; done ) &
( for s in 2 3; do $B --out /work/runs/s6/F_seed$s --tasks fm16 --fm16-steps 10000 --protocol nino --eval-points 40 --seeds 1 --threads 1 --target best80 --first-seed $s \
   --set data.probe_fraction=0.035 --modes plain $S plain@optim.name=muon > F_seed$s.log 2>&1; done ) &
wait
