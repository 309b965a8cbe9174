#!/bin/bash
# WNN+ on the 6 x 256 GPT under warmup + cosine, seed 1, at the record's 10 % tolerance (as
# wide_gpt_cosine_nowcasters/, where it kept a jump 4.5 % above plain's guess: 0.86x) and at
# tolerance 0 (the library's default), beside plain in one run; nothing else on the machine but
# Muon's 6 x 256 cosine run (muon_wide_cos/): each run on its own core.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at 262ff14
D=bench/results/record_v2/epyc_avx512/wide_gpt_cosine_wnn_tolerance
$B --out $D/seed1 --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol cosine \
   --gpt-wide-steps 2000 --eval-points 20 --first-seed 1 --set optim.lr=0.003 --set nowcast.tolerance=0.1 \
   --set nowcast.period=500 --set nowcast.verify_after=40 \
   --modes plain wnn-late wnn-late@nowcast.tolerance=0 > $D/seed1.log 2>&1
# Seeds 2 and 3 at once, each on its own core, WNN+ at tolerance 0 only (its 10 % runs are
# wide_gpt_cosine_nowcasters/'s; record_v2's gptwide_cosine_wnn_tol0 part runs these two modes):
run() { s=$1; $B --out $D/seed$s --tasks gpt-wide --seeds 1 --threads 1 --target best80 --protocol cosine \
   --gpt-wide-steps 2000 --eval-points 20 --first-seed $s --set optim.lr=0.003 --set nowcast.tolerance=0.1 \
   --set nowcast.period=500 --set nowcast.verify_after=40 --modes plain wnn-late@nowcast.tolerance=0 > $D/seed$s.log 2>&1; }
run 2 & run 3 & wait
