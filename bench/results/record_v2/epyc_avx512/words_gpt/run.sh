#!/bin/bash
# Is it the rate? NiNo's language tasks (3-layer, d-64 GPTs on GPT-2 tokens) train at a slow constant
# rate (its train_lm.py: AdamW 2e-4). The released nowcasters on a GPT of that shape on the King James
# Bible in word-level tokens (bench/python/word_tokens.py --kjv, vocab 8192; batch 16 x 64 tokens,
# 4000 steps, period 1000, NiNo's protocol: constant rate, no warmup), at 2e-4 and at plain's best
# rate, and on the byte-level tiny GPT at 2e-4. AMD EPYC with AVX-512, 1 thread per invocation, two
# to four invocations at once on the 2 vCPUs (the modes of each alternate every 10 steps).
# bash bench/record_v2.sh gptwords_slow gptwords_tuned gptwords_setting gpt_slow repeats these runs
# (seeds 1-3; gptwords_setting seed 1) in four invocations instead of the ones below.
B=build/bench/hybrid_bench   # what ran: a copy of it, built at da14952
python3 bench/python/word_tokens.py --kjv kjv_words.bin --vocab 8192
T="--set data.dataset=tokens --set data.path=kjv_words.bin --set model.vocab_size=8192 --set model.n_layer=3 --set model.n_embd=64 --set model.n_head=4 --set data.batch_size=16 --set data.context=64 --set data.val_batches=32 --set optim.weight_decay=0.01"
R=bench/results/record_v2/epyc_avx512/words_gpt
# Plain's constant rate (seed 1): 2e-3 against 2e-4, 6e-4 and 5e-3.
$B --out $R/rate_screen --tasks gpt --protocol nino --gpt-steps 4000 --eval-points 20 --seeds 1 --threads 1 --target best80 $T \
  --set optim.lr=0.002 --modes plain plain@optim.lr=0.0002 plain@optim.lr=0.0006 plain@optim.lr=0.005 > $R/rate_screen.log 2>&1 &
# Seed 1 at 2e-4: unverified, and judged 40 steps later (the tiny GPT's window; the library's tolerance 0).
$B --out $R/slow_seed1 --tasks gpt --protocol nino --gpt-steps 4000 --eval-points 20 --seeds 1 --threads 1 --target best80 $T \
  --set optim.lr=0.0002 --modes plain wnn-noverify nino-noverify wnn-late@nowcast.verify_after=40 nino-late@nowcast.verify_after=40 > $R/slow_seed1.log 2>&1 &
wait
# Seed 1 at 2e-3 and 5e-3: unverified, and judged 250 steps later (tolerance 0, a 10 % redo budget).
L=nowcast.verify_after=250@nowcast.redo_budget=0.1
for lr in 0.002 0.005; do
$B --out $R/tuned_seed1_lr$lr --tasks gpt --protocol nino --gpt-steps 4000 --eval-points 20 --seeds 1 --threads 1 --target best80 $T \
  --set optim.lr=$lr --modes plain wnn-noverify nino-noverify wnn-late@$L nino-late@$L > $R/tuned_seed1_lr$lr.log 2>&1 &
done
wait
# Seeds 2-3 unverified at 2e-4 and 2e-3; beside them FM-16's setting of record at 2e-3 (seed 1) and the
# byte-level tiny GPT at 2e-4 (3000 steps, seeds 1-3).
for lr in 0.0002 0.002; do
$B --out $R/seeds2_3_lr$lr --tasks gpt --protocol nino --gpt-steps 4000 --eval-points 20 --seeds 2 --first-seed 2 --threads 1 --target best80 $T \
  --set optim.lr=$lr --modes plain wnn-noverify nino-noverify > $R/seeds2_3_lr$lr.log 2>&1 &
done
S=span-power@nowcast.tolerance=0.1@nowcast.power_level_states=4@nowcast.last_jump_fraction=0.5@nowcast.jump_norm_scale=0.25@nowcast.redo_budget=0.1
$B --out $R/setting_lr0.002 --tasks gpt --protocol nino --gpt-steps 4000 --eval-points 20 --seeds 1 --threads 1 --target best80 $T \
  --set optim.lr=0.002 --set data.probe_fraction=0.035 --modes plain nino-$S wnn-$S wnn-noverify@nowcast.jump_norm_scale=0.25 > $R/setting_lr0.002.log 2>&1 &
for s in 1 2 3; do   # (seed 1 ran beside the three invocations above; seeds 2-3 after setting_lr0.002)
$B --out $R/byte_slow_seed$s --tasks gpt --protocol nino --gpt-steps 3000 --eval-points 30 --seeds 1 --first-seed $s --threads 1 --target best80 \
  --set optim.lr=0.0002 --modes plain wnn-noverify nino-noverify > $R/byte_slow_seed$s.log 2>&1 &
done
wait
# Between the rates: WNN+'s unverified jumps at 2e-4, 6e-4 and 1e-3 against plain at its best 2e-3,
# whose run sets the target (seeds 1-2, the two at once).
for s in 1 2; do
$B --out $R/mid_seed$s --tasks gpt --protocol nino --gpt-steps 4000 --eval-points 20 --seeds 1 --first-seed $s --threads 1 --target best80 $T \
  --set optim.lr=0.002 --modes plain wnn-noverify@optim.lr=0.0002 wnn-noverify@optim.lr=0.0006 wnn-noverify@optim.lr=0.001 > $R/mid_seed$s.log 2>&1 &
done
wait
# Warmup + cosine (protocol ii, 50 warmup steps) at a 2e-3 peak with the nowcasters unverified, and
# plain at a 5e-3 peak beside it (a rate check); seeds 1-2, the two at once.
for s in 1 2; do
$B --out $R/cosine_seed$s --tasks gpt --protocol cosine --gpt-steps 4000 --eval-points 20 --seeds 1 --first-seed $s --threads 1 --target best80 $T \
  --set optim.lr=0.002 --modes plain wnn-noverify nino-noverify plain@optim.lr=0.005 > $R/cosine_seed$s.log 2>&1 &
done
wait
