// Memory planner: predicts the peak tensor memory of a training step from the model shape and the
// memory levers, before anything is allocated, and searches the levers for settings that fit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hybrid/kernels/recompute.h"
#include "hybrid/models/gpt.h"

namespace ht {

enum class OptimizerKind {
  AdamW,        // fp32 m and v: 8 B/param
  AdamW8bit,    // block-wise 8-bit m and v: ~2.03 B/param (small tensors stay fp32)
  Sgd,          // no state
  SgdMomentum,  // one fp32 momentum buffer: 4 B/param
  Muon,         // fp32 momentum for the weight matrices (4 B/param), AdamW's m and v for the rest
};
enum class TrainMode { Plain, Hybrid, Lookahead, Nowcast };

struct MemoryLevers {
  OptimizerKind optimizer = OptimizerKind::AdamW;
  bool muon_hidden_only = false;  // optim.muon_hidden_only: a classifier's first and last matrices take AdamW's step
  RecomputeLevel recompute = RecomputeLevel::None;
  int64_t recompute_every = 1;  // Full: blocks 0, n, 2n, ... keep only their input
  AttentionKind attention = AttentionKind::Naive;  // Fused is planned as Flash (no T x T kept)
  // BF16: activations kept for backward (and most workspace) are bf16, each block keeps bf16
  // copies of its weights for backward, the LM head a transient bf16 copy of wte; parameters,
  // gradients, optimizer state and the residual stream stay fp32.
  Precision precision = Precision::FP32;
  TrainMode mode = TrainMode::Plain;
  // Hybrid mode: what the engine keeps for parameters of these element counts (snapshot, buffers,
  // predictor). The models layer knows no predictors: the caller passes the hybrid layer's
  // ht::hybrid_state_bytes bound to its options.
  std::function<int64_t(const std::vector<int64_t>& numels)> hybrid_state_bytes;
  // Nowcast mode: the recorded states and the nowcaster's own tensors kept between jumps, and
  // the workspace one jump adds (ht::nowcast_state_bytes / nowcast_jump_bytes bound to options).
  std::function<int64_t(const std::vector<int64_t>& numels)> nowcast_state_bytes;
  std::function<int64_t(const std::vector<int64_t>& numels)> nowcast_jump_bytes;
  int64_t probe_batches = 2;       // hybrid.probe_batches (nowcast.probe_batches): batches in the verification forward
  bool weight_average = false;     // train.average_decay > 0: one more copy of the parameters
  bool average_lag_correction = false;  // train.average_lag_correction > 0: one more copy
  bool outer_momentum = false;     // Lookahead with lookahead.momentum > 0 (SNOO): one more copy
  // Data-parallel (train --nproc N): the figures are one rank's, for the rank's share of the
  // batch, which the caller passes in TrainShape::batch (the largest share: ceil(batch / ranks)).
  // Gradients live in allreduce buckets (their sizes as src/dist lays them out) for the whole
  // run, also in predicted steps; with shard_optimizer, AdamW keeps the moments of 1/ranks of
  // the parameters plus ZeRO's all-gather window.
  int64_t ranks = 1;
  bool shard_optimizer = false;
  int64_t bucket_bytes = 25 << 20;
  int64_t first_bucket_bytes = 1 << 20;
};

struct TrainShape {
  int64_t batch = 16;       // sequences (or images) per data batch
  int64_t context = 128;    // tokens per sequence (GPT)
  int64_t micro_splits = 1; // trainer micro-batches per batch (its out-of-memory ladder)
  int64_t grad_accum = 1;   // batches per optimizer step: no effect on memory
  int64_t threads = 1;      // intra-op threads: each keeps its own attention scratch tiles
  // The step runs on CUDA, where bf16 is LibTorch's autocast: its softmax in naive attention
  // writes fp32 probabilities (kept by softmax's backward) and casts them to bf16 for the matmul
  // with v (kept by the matmul's), so each block keeps both instead of one bf16 copy.
  bool cuda = false;
};

// Bytes as the tracking allocator counts them (each tensor rounded to its size class).
struct MemoryEstimate {
  int64_t params = 0;  // with the model's other tensors (naive attention's causal mask)
  int64_t grads = 0;
  int64_t optimizer_state = 0;
  int64_t mode_state = 0;    // hybrid snapshot + buffers + predictor, or Lookahead's slow weights,
                             // and the weight average
  int64_t activations = 0;   // saved for backward (and the data batch) at the peak moment
  int64_t transient = 0;     // workspace and gradients in flight at the peak moment
  // A forward without grad: evaluation, or (hybrid) a predicted step's verification forward on
  // the probe, with the gradients freed.
  int64_t predict_peak = 0;
  int64_t peak = 0;          // max over the step: what allocator_stats().peak_bytes reports
  std::string peak_at;       // where the peak happens, e.g. "LM head (end of forward)"

  int64_t resident() const { return params + grads + optimizer_state + mode_state; }
};

MemoryEstimate estimate_gpt_memory(const GPTConfig& model, const TrainShape& shape,
                                   const MemoryLevers& levers);
// kind "mlp" (784-512-256-10) or "cnn" (two conv+pool stages) on 28x28 images; the attention
// and recompute levers do not apply. Throws std::invalid_argument for another kind.
MemoryEstimate estimate_classifier_memory(const std::string& kind, const TrainShape& shape,
                                          const MemoryLevers& levers);

struct Recommendation {
  bool fits = false;
  MemoryLevers levers;          // the cheapest settings that fit (or the most frugal tried)
  TrainShape shape;
  MemoryEstimate estimate;      // of those settings
  std::vector<std::string> changes;  // config overrides, e.g. "memory.recompute=full"
};

// Tries the levers in order of their cost in step time - flash attention, bf16 compute (faster
// where the CPU has bf16 instructions: then second; it rounds, so it comes after the exact flash),
// 8-bit AdamW (a slower optimizer step, a small share of a step), selective recompute (each MLP's
// GELU output), full recompute every 4/2/1 blocks (up to one more forward), bf16 here instead when
// the CPU lacks bf16 instructions (emulated: slower than fp32), then smaller batches with more
// accumulation (batch / k, grad_accum * k for divisors k of the batch: same effective batch) - and
// returns the first combination whose estimated peak is <= budget. bf16_is_fast: the CPU has bf16
// instructions (ht::cpu_bf16_features().any()).
// Levers already on in `current` stay on. When nothing fits, fits = false and the estimate is that
// of the most frugal combination (the minimum this model and batch need).
Recommendation recommend_gpt(const GPTConfig& model, const TrainShape& shape,
                             const MemoryLevers& current, int64_t budget_bytes,
                             bool bf16_is_fast = true);

// Largest batch (<= max_batch) at this context whose estimated peak fits the budget; 0 if none.
int64_t max_gpt_batch(const GPTConfig& model, TrainShape shape, const MemoryLevers& levers,
                      int64_t budget_bytes, int64_t max_batch = 4096);

// Config value spellings (optim.name, run.mode); AttentionKind's is attention.h's to_string.
std::string to_string(OptimizerKind kind);
std::string to_string(TrainMode mode);

}  // namespace ht
