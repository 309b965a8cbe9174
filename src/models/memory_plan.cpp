// Peak-memory model of one training step, written from what our kernels allocate and save for
// backward (gpt_block.cpp, attention.cpp, flash_attention.cpp, lm_head_loss.cpp, recompute.cpp).
#include "hybrid/models/memory_plan.h"

#include <algorithm>
#include <stdexcept>

#include "hybrid/core/allocator.h"

namespace ht {
namespace {

constexpr int64_t kF32 = 4;
constexpr int64_t kBF16 = 2;
constexpr int64_t kI64 = 8;
// CPU generator state that recompute() saves per recomputed region (mt19937 + normal cache).
constexpr int64_t kRngStateBytes = 5056;
// lm_head_loss.cpp: rows per chunk keep a chunk's logits at 2^24 floats.
constexpr int64_t kHeadChunkElements = int64_t{1} << 24;
// AdamW8bit defaults (adamw8bit.h): quantization block and the smallest quantized tensor.
constexpr int64_t kQuantBlock = 256;
constexpr int64_t kMinQuantized = 4096;

int64_t blk(int64_t bytes) { return allocator_block_bytes(bytes); }

// A parameter as the planner counts it: its elements and, for Muon (session.cpp's muon_params),
// the weight matrix [rows, cols] it orthogonalizes in `blocks` column blocks; rows == 0 for the
// parameters that take AdamW's step (lookup tables, biases, norms).
struct PlannedParam {
  int64_t numel = 0;
  int64_t rows = 0, cols = 0, blocks = 1;
  bool matrix() const { return rows > 0; }
};

PlannedParam vector_param(int64_t numel) { return {numel}; }
PlannedParam matrix_param(int64_t rows, int64_t cols, int64_t blocks = 1) { return {rows * cols, rows, cols, blocks}; }

std::vector<int64_t> numels_of(const std::vector<PlannedParam>& params) {
  std::vector<int64_t> n;
  for (const auto& p : params) n.push_back(p.numel);
  return n;
}

// optim.muon_hidden_only: the first matrix (the layer that reads the images) and the last (the
// head) take AdamW's step, so they are planned as AdamW's parameters (model_registry.h's input_output).
void plan_input_output_as_adamw(std::vector<PlannedParam>& params, const MemoryLevers& levers) {
  if (levers.optimizer != OptimizerKind::Muon || !levers.muon_hidden_only) return;
  auto is_matrix = [](const PlannedParam& p) { return p.matrix(); };
  auto first = std::find_if(params.begin(), params.end(), is_matrix);
  auto last = std::find_if(params.rbegin(), params.rend(), is_matrix);
  if (first != params.end()) *first = vector_param(first->numel);
  if (last != params.rend()) *last = vector_param(last->numel);
}

// Bytes of optimizer state for one parameter of n elements.
int64_t optimizer_bytes(OptimizerKind kind, int64_t n, bool matrix) {
  switch (kind) {
    case OptimizerKind::Muon:
      return matrix ? blk(n * kF32) : 2 * blk(n * kF32);
    case OptimizerKind::AdamW:
      return 2 * blk(n * kF32);
    case OptimizerKind::AdamW8bit:
      if (n < kMinQuantized) return 2 * blk(n * kF32);
      return 2 * blk(n) + 2 * blk((n + kQuantBlock - 1) / kQuantBlock * kF32);
    case OptimizerKind::Sgd:
      return 0;
    case OptimizerKind::SgdMomentum:
      return blk(n * kF32);
  }
  return 0;
}

// The most Muon's step allocates at once (muon.cpp): the Nesterov momentum and the update of the
// largest matrix, and inside one block's orthogonalization its normalized copy, the next iterate
// and the two [r, r] Gram products (fp32; the bf16 iterations need less).
int64_t muon_step_bytes(const std::vector<PlannedParam>& params) {
  int64_t most = 0;
  for (const auto& m : params) {
    if (!m.matrix()) continue;
    const int64_t cols = m.cols / m.blocks, r = std::min(m.rows, cols);
    most = std::max(most, 2 * blk(m.rows * m.cols * kF32) + 2 * blk(m.rows * cols * kF32) + 2 * blk(r * r * kF32));
  }
  return most;
}

// Muon's step runs after backward, activations freed, gradients kept: a peak of its own when the
// model's activations are small beside its largest matrix (an MLP on small batches).
void consider_muon_step(MemoryEstimate& e, const std::vector<PlannedParam>& params, const MemoryLevers& levers) {
  if (levers.optimizer != OptimizerKind::Muon) return;
  const int64_t p = e.resident() + muon_step_bytes(params);
  if (p > e.peak) {
    e.peak = p;
    e.peak_at = "Muon's optimizer step";
  }
}

// Fills params, grads, optimizer state and mode state from the model's parameters.
void account_parameters(const std::vector<PlannedParam>& params, const MemoryLevers& levers, MemoryEstimate& e) {
  const std::vector<int64_t> numels = numels_of(params);
  int64_t copy = 0;  // one fp32 copy of every parameter, as the allocator counts it
  for (const auto& p : params) {
    copy += blk(p.numel * kF32);
    e.optimizer_state += optimizer_bytes(levers.optimizer, p.numel, p.matrix());
  }
  e.params = copy;
  e.grads = copy;  // zero_grad() zeroes in place: from the first backward on, grads stay
  if (levers.ranks > 1) {
    // src/dist's buckets: parameters in reverse order, a new bucket past the cap (the first
    // bucket's is smaller); each bucket is one allocation the gradients are views of.
    e.grads = 0;
    int64_t bucket = 0, buckets = 0;
    for (auto it = numels.rbegin(); it != numels.rend(); ++it) {
      const int64_t cap = buckets <= 1 ? levers.first_bucket_bytes : levers.bucket_bytes;
      if (buckets == 0 || (bucket > 0 && (bucket + *it) * kF32 > cap)) {
        if (buckets > 0) e.grads += blk(bucket * kF32);
        bucket = 0;
        ++buckets;
      }
      bucket += *it;
    }
    e.grads += blk(bucket * kF32);
    if (levers.shard_optimizer && levers.optimizer == OptimizerKind::AdamW) {
      // zero_adamw.cpp: m and v of ceil(P / ranks) elements (rank 0's range is the largest),
      // and the all-gather's send window and N receive windows.
      int64_t total = 0;
      for (int64_t n : numels) total += n;
      const int64_t chunk = (total + levers.ranks - 1) / levers.ranks;
      const int64_t window = std::max<int64_t>(1, std::min((chunk + 7) / 8, levers.bucket_bytes / kF32 / levers.ranks));
      e.optimizer_state = 2 * blk(chunk * kF32) + blk(window * kF32) + blk(window * levers.ranks * kF32);
    }
  }
  // weight_average.cpp: one copy, two with lag correction (its third, the weights held while the
  // corrected average is evaluated, lives only in evaluations: forwards without a backward)
  const int64_t average = levers.weight_average ? copy * (levers.average_lag_correction ? 2 : 1) : 0;
  e.mode_state = average;
  if (levers.mode == TrainMode::Lookahead) {
    e.mode_state += copy;                              // slow weights
    if (levers.outer_momentum) e.mode_state += copy;  // SNOO's momentum buffer
  }
  if (levers.mode == TrainMode::Nowcast) {
    if (!levers.nowcast_state_bytes)
      throw std::invalid_argument("memory plan: nowcast mode needs MemoryLevers::nowcast_state_bytes (ht::nowcast_state_bytes)");
    e.mode_state += levers.nowcast_state_bytes(numels);  // 5 recorded states, the nowcaster
    return;
  }
  if (levers.mode != TrainMode::Hybrid) return;
  if (!levers.hybrid_state_bytes)
    throw std::invalid_argument("memory plan: hybrid mode needs MemoryLevers::hybrid_state_bytes (ht::hybrid_state_bytes)");
  e.mode_state = average + levers.hybrid_state_bytes(numels);  // snapshot, buffers, the predictor
}

// What one nowcast jump adds on top of the resident state (the nowcaster's workspace); 0 in
// other modes.
int64_t nowcast_jump(const std::vector<int64_t>& numels, const MemoryLevers& levers) {
  return levers.mode == TrainMode::Nowcast && levers.nowcast_jump_bytes ? levers.nowcast_jump_bytes(numels) : 0;
}

// GPT's parameters in named_parameters() order: wte, wpe (lookup tables), per block ln_1,
// c_attn (Conv1D [in, out], q | k | v thirds), c_proj, ln_2, c_fc, c_proj (weights, biases), ln_f.
std::vector<PlannedParam> gpt_parameters(const GPTConfig& g) {
  const int64_t C = g.n_embd;
  std::vector<PlannedParam> p = {vector_param(g.vocab_size * C), vector_param(g.block_size * C)};
  for (int64_t l = 0; l < g.n_layer; ++l) {
    for (const PlannedParam& k : {vector_param(C), vector_param(C), matrix_param(C, 3 * C, 3), vector_param(3 * C),
                                  matrix_param(C, C), vector_param(C), vector_param(C), vector_param(C),
                                  matrix_param(C, 4 * C), vector_param(4 * C), matrix_param(4 * C, C), vector_param(C)})
      p.push_back(k);
  }
  p.push_back(vector_param(C));  // ln_f
  p.push_back(vector_param(C));
  return p;
}

// Tensor sizes of one GPT block for a micro-batch of N = B*T rows; each value is what the
// allocator hands out for that tensor. Activations (tok*, probs) are in the compute dtype; the
// residual stream, statistics, score tiles and weight gradients are fp32 in both precisions.
struct BlockTensors {
  int64_t tok1, tok3, tok4;  // [N, C], [N, 3C], [N, 4C] activations
  int64_t res;               // [N, C] fp32: the residual stream and its gradient
  int64_t stat;              // LayerNorm mean or rstd, [B, T, 1]
  int64_t probs;             // naive attention probabilities [B, nh, T, T]
  int64_t lse;               // flash row logsumexp [B, nh, T]
  int64_t tile;              // one per-thread [T, T] fp32 scratch of naive attention
  int64_t dw_max;            // largest weight gradient in flight ([C, 4C])
  // bf16 only (0 in fp32): the bf16 weight copies a block keeps for backward (linear.cpp), the
  // fp32 accumulators a bf16 GEMM output passes through ([N, 4C], [N, 3C]), and the extra
  // per-thread tiles of the bf16 naive core (fp32 probabilities and a bf16 ds).
  int64_t weights_bf16 = 0, acc4 = 0, acc3 = 0, bf16_tiles = 0;
  bool bf16 = false;
};

// Selective: the MLP's GELU output is rebuilt in backward, and so is naive attention's core.
enum class LayerKind { Plain, Selective, Recomputed };

// What a block keeps for backward after its forward ran.
int64_t saved_bytes(const BlockTensors& t, LayerKind kind, AttentionKind attention) {
  if (kind == LayerKind::Recomputed) return t.res + kRngStateBytes;  // its input only
  // x (ln_1 input), ln_1 out, c_proj input y, h (ln_2 input), ln_2 out: 5 x [N, C] (bf16: the
  // LayerNorms keep bf16 copies of their fp32 inputs); qkv; c_fc out (GELU input) and GELU out
  // (c_proj input; Selective: rebuilt in backward); four LayerNorm statistics; bf16: the weights.
  int64_t b = 5 * t.tok1 + t.tok3 + 2 * t.tok4 + 4 * t.stat + t.weights_bf16;
  if (kind == LayerKind::Selective) b += kRngStateBytes - t.tok4;
  if (attention != AttentionKind::Naive) return b + t.lse;   // q|k|v views and y: no T x T
  if (kind == LayerKind::Selective) return b + kRngStateBytes;  // qkv only
  return b + t.probs;
}

// Bytes of the part of a block that backward frees first (the MLP half: h, ln_2 out and stats,
// c_fc out, GELU out) - gone when the attention half's backward runs.
int64_t mlp_half_bytes(const BlockTensors& t, LayerKind kind) {
  return 2 * t.tok1 + 2 * t.stat + (kind == LayerKind::Selective ? t.tok4 : 2 * t.tok4);
}

// Live bytes of block `kind`'s own tensors at the worst moment of its backward (the gradient
// arriving at its output is counted by the caller).
int64_t backward_bytes(const BlockTensors& t, LayerKind kind, AttentionKind attention,
                       int64_t threads) {
  // A recomputed block re-runs as a plain one from its saved input and keeps its output alive.
  const LayerKind inner = kind == LayerKind::Recomputed ? LayerKind::Plain : kind;
  int64_t held = saved_bytes(t, inner, attention);
  if (kind == LayerKind::Recomputed) held += t.tok1 + kRngStateBytes;
  // MLP half: c_proj's dx [N, 4C] (bf16: through an fp32 accumulator) and dW, then GELU's dx
  // while c_fc out is still saved. Selective first re-runs GELU and c_proj: their outputs join
  // what was saved. bf16: the residual gradient arrives fp32 and is cast for the branch.
  int64_t mlp = held + t.tok4 + t.acc4 + t.dw_max + (t.bf16 ? t.tok1 : 0);
  if (kind == LayerKind::Selective) mlp += t.tok4 + t.tok1;
  // Attention half: the gradient into attn.c_proj's input, then the core's backward.
  int64_t core = 0;
  if (attention != AttentionKind::Naive) {
    // dq, dk, dv (bf16: fp32 accumulators, then bf16 copies); each reshaped to [B, T, C] (a copy
    // of the transposed layout) and then concatenated into d qkv [B, T, 3C].
    core = 3 * t.tok1 + t.tok3 + (t.bf16 ? 3 * t.res : 0);
  } else {
    // d qkv, per-thread dp and ds tiles (bf16: and the fp32 probabilities and a bf16 ds)
    core = t.tok3 + threads * (2 * t.tile + t.bf16_tiles);
    if (kind == LayerKind::Selective) core += t.probs + t.tok1;  // re-run: probs and y
  }
  int64_t attn = held - mlp_half_bytes(t, inner) + t.tok1 + core;
  // In a recomputed block the gradient at its output is also held by the outer backward, so the
  // residual sum d(out) + d(MLP half) cannot reuse it in place: one more [N, C].
  if (kind == LayerKind::Recomputed) attn += t.tok1;
  return std::max(mlp, attn);
}

}  // namespace

MemoryEstimate estimate_gpt_memory(const GPTConfig& g, const TrainShape& shape,
                                   const MemoryLevers& levers) {
  if (shape.batch < 1 || shape.context < 1 || shape.micro_splits < 1 || shape.threads < 1)
    throw std::invalid_argument("estimate_gpt_memory: batch, context, micro_splits and threads "
                                "must be >= 1");
  if (shape.context > g.block_size)
    throw std::invalid_argument("estimate_gpt_memory: context " + std::to_string(shape.context) +
                                " exceeds the model's block_size " + std::to_string(g.block_size));
  if (levers.recompute_every < 1)
    throw std::invalid_argument("estimate_gpt_memory: recompute_every must be >= 1");
  MemoryEstimate e;
  const std::vector<PlannedParam> params = gpt_parameters(g);
  account_parameters(params, levers, e);
  // The naive core keeps an additive causal mask [block_size, block_size] (attention_core.cpp).
  if (levers.attention == AttentionKind::Naive) e.params += blk(g.block_size * g.block_size * kF32);
  const bool bf16 = levers.precision == Precision::BF16;
  const int64_t kAct = bf16 ? kBF16 : kF32;  // bytes of an activation element

  // The trainer splits the batch with tensor_split: the first micro-batch is the largest.
  const int64_t splits = std::min(shape.micro_splits, shape.batch);
  const int64_t Bm = (shape.batch + splits - 1) / splits;
  const int64_t T = shape.context, C = g.n_embd, V = g.vocab_size, nh = g.n_head;
  const int64_t N = Bm * T;
  auto block_tensors = [&](int64_t rows) {  // rows: sequences in the forward
    const int64_t n = rows * T;
    BlockTensors b{};
    b.tok1 = blk(n * C * kAct);
    b.tok3 = blk(n * 3 * C * kAct);
    b.tok4 = blk(n * 4 * C * kAct);
    b.res = blk(n * C * kF32);
    b.stat = blk(n * kF32);
    b.probs = bf16 && shape.cuda ? blk(rows * nh * T * T * kF32) + blk(rows * nh * T * T * kBF16)
                                 : blk(rows * nh * T * T * kAct);
    b.lse = blk(rows * nh * T * kF32);
    b.tile = blk(T * T * kF32);
    b.dw_max = blk(4 * C * C * kF32);
    if (bf16) {
      b.bf16 = true;
      b.weights_bf16 = blk(3 * C * C * kBF16) + blk(C * C * kBF16) + 2 * blk(4 * C * C * kBF16);
      b.acc4 = blk(n * 4 * C * kF32);
      b.acc3 = blk(n * 3 * C * kF32);
      b.bf16_tiles = blk(T * T * kF32) + blk(T * T * kBF16);
    }
    return b;
  };
  const BlockTensors t = block_tensors(Bm);
  // Hybrid keeps its verification probe (token ids and targets of probe_batches batches).
  const int64_t probe_rows = shape.batch * levers.probe_batches;
  if (levers.mode == TrainMode::Hybrid) e.mode_state += 2 * blk(probe_rows * T * kI64);

  // Which blocks keep what (session.cpp): Full recomputes blocks 0, n, 2n, ... whole and leaves
  // the others plain; Selective rebuilds each MLP's GELU output and wraps naive attention in
  // recompute (flash needs nothing more).
  auto kind_of = [&levers](int64_t layer) {
    if (levers.recompute == RecomputeLevel::Full && layer % levers.recompute_every == 0)
      return LayerKind::Recomputed;
    if (levers.recompute == RecomputeLevel::Selective) return LayerKind::Selective;
    return LayerKind::Plain;
  };
  std::vector<int64_t> below(static_cast<size_t>(g.n_layer) + 1, 0);  // saved by blocks < l
  for (int64_t l = 0; l < g.n_layer; ++l)
    below[l + 1] = below[l] + saved_bytes(t, kind_of(l), levers.attention);

  const int64_t batch = 2 * blk(shape.batch * T * kI64);  // input and target token ids
  const int64_t dwte = blk(V * C * kF32);  // LM-head weight gradient, made in forward (fused loss)
  const int64_t chunk = blk(std::clamp<int64_t>(kHeadChunkElements / V, 1, N) * V * kF32);
  const int64_t wte_bf16 = bf16 ? blk(V * C * kBF16) : 0;  // the head's bf16 weight, per call
  const int64_t resident = e.resident();

  // End of forward, inside the fused LM head: the last block's output (ln_f input; bf16: its
  // bf16 copy), ln_f out, dh and dwte, and a chunk of logits plus its log-softmax (fp32 in both).
  const int64_t head_saved = below[g.n_layer] + t.tok1 + 2 * t.stat;
  const int64_t head_peak =
      resident + batch + head_saved + t.tok1 + t.tok1 + dwte + 2 * chunk + wte_bf16;
  e.peak = head_peak;
  e.activations = batch + head_saved;
  e.transient = 2 * t.tok1 + dwte + 2 * chunk + wte_bf16;
  e.peak_at = "LM head (end of forward)";

  // Backward of the top block, and of the topmost recomputed block (whose re-run rebuilds a
  // whole block's activations). dwte waits in the autograd buffer until the embedding's
  // gradient joins it at the very end; d(output) is in flight.
  auto consider_backward = [&](int64_t l) {
    const int64_t own = backward_bytes(t, kind_of(l), levers.attention, shape.threads);
    const int64_t p = resident + batch + below[l] + own + t.res + dwte;
    if (p > e.peak) {
      e.peak = p;
      e.activations = batch + below[l] + saved_bytes(t, kind_of(l), levers.attention);
      e.transient = p - resident - e.activations;
      e.peak_at = "backward of block " + std::to_string(l) +
                  (kind_of(l) == LayerKind::Recomputed ? " (recomputed)" : "");
    }
  };
  consider_backward(g.n_layer - 1);
  for (int64_t l = g.n_layer - 1; l >= 0; --l) {
    if (kind_of(l) == LayerKind::Recomputed) {
      consider_backward(l);
      break;
    }
  }

  // A forward without grad: one block's temporaries at a time. MLP: x, the attention branch a,
  // h, ln_2 out, c_fc out, GELU out. Evaluation runs with the gradients resident on a data
  // batch; hybrid's predicted steps free the gradients and verify on the probe (already counted).
  // bf16: x and h are fp32 (the residual), the branch tensors bf16, and a bf16 GEMM output
  // passes through an fp32 accumulator; the LM head casts wte.
  auto nograd_temporaries = [&](int64_t rows) {
    const BlockTensors f = block_tensors(rows);
    const int64_t mlp = bf16 ? 2 * f.res + 2 * f.tok1 + std::max(f.acc4 + f.tok4, 2 * f.tok4 + f.res)
                             : 4 * f.tok1 + 2 * f.tok4;
    const int64_t x_ln = bf16 ? f.res + f.tok1 : 2 * f.tok1;
    const int64_t tiles = shape.threads * (f.tile + (bf16 ? f.tile : 0));
    const int64_t attn = levers.attention != AttentionKind::Naive
                             ? x_ln + f.tok3 + f.tok1 + f.lse + (bf16 ? f.res : 0)
                             : x_ln + f.tok3 + f.probs + f.tok1 + tiles;
    const int64_t rows_in_chunk = std::clamp<int64_t>(kHeadChunkElements / V, 1, rows * T);
    const int64_t head = x_ln + 2 * blk(rows_in_chunk * V * kF32) + wte_bf16;
    return std::max({mlp, attn, head});
  };
  if (levers.mode == TrainMode::Hybrid) {
    // Predict phases free the gradients, except a data-parallel run's: they are its buckets.
    e.predict_peak = resident - (levers.ranks > 1 ? 0 : e.grads) + nograd_temporaries(probe_rows);
  } else if (levers.mode == TrainMode::Nowcast) {
    // A jump: the probe (kept through it) and either its forward or the nowcaster's workspace.
    e.predict_peak = resident + 2 * blk(probe_rows * T * kI64) +
                     std::max(nograd_temporaries(probe_rows), nowcast_jump(numels_of(params), levers));
  } else {
    e.predict_peak = resident + batch + nograd_temporaries(Bm);
  }
  if (e.predict_peak > e.peak) {
    e.peak = e.predict_peak;
    e.peak_at = levers.mode == TrainMode::Nowcast ? "a nowcast jump" : "forward without grad";
  }
  consider_muon_step(e, params, levers);
  return e;
}

MemoryEstimate estimate_classifier_memory(const std::string& kind, const TrainShape& shape,
                                          const MemoryLevers& levers) {
  if (shape.batch < 1 || shape.micro_splits < 1)
    throw std::invalid_argument("estimate_classifier_memory: batch and micro_splits must be >= 1");
  const int64_t B = shape.batch;
  const int64_t splits = std::min(shape.micro_splits, B);
  const int64_t Bm = (B + splits - 1) / splits;
  const int64_t images = blk(B * 28 * 28 * kF32) + blk(B * kI64);  // the data batch
  MemoryEstimate e;
  int64_t saved = 0, back = 0;
  std::vector<PlannedParam> params;
  if (kind == "mlp") {
    // 784-512-256-10: Linear saves its input, ReLU its output; cross entropy its log-softmax.
    const std::vector<int64_t> w = {784, 512, 256, 10};
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      params.push_back(matrix_param(w[i + 1], w[i]));  // Linear [out, in]
      params.push_back(vector_param(w[i + 1]));
    }
    plan_input_output_as_adamw(params, levers);
    account_parameters(params, levers, e);
    auto act = [&](int64_t width) { return blk(Bm * width * kF32); };
    for (size_t i = 1; i + 1 < w.size(); ++i) saved += act(w[i]);  // ReLU outputs
    saved += 2 * act(w.back());                                     // logits, log-softmax
    // Backward of layer i (w[i-1] -> w[i]): the ReLU outputs below it, the gradient at its
    // output, and what its node makes: dx (not for the images) and dW.
    for (size_t i = w.size() - 1; i >= 1; --i) {
      int64_t live = act(w[i]) + blk(w[i - 1] * w[i] * kF32);
      for (size_t j = 1; j < i; ++j) live += act(w[j]);
      if (i > 1) live += act(w[i - 1]);
      back = std::max(back, live - saved);
    }
    back = std::max<int64_t>(back, 0);
  } else if (kind == "cnn") {
    // conv3x3(1->16)+ReLU+pool2, conv3x3(16->32)+ReLU+pool2, fc(32*7*7 -> 10). ReLU saves its
    // output (also max-pool's input), max-pool its int64 argmax, conv2 and fc their inputs.
    params = {matrix_param(16, 9), vector_param(16), matrix_param(32, 16 * 9), vector_param(32),  // kernels as
              matrix_param(10, 32 * 7 * 7), vector_param(10)};                                  // [out, in*kh*kw]
    plan_input_output_as_adamw(params, levers);
    account_parameters(params, levers, e);
    const int64_t r1 = blk(Bm * 16 * 28 * 28 * kF32), p1 = blk(Bm * 16 * 14 * 14 * kF32);
    const int64_t r2 = blk(Bm * 32 * 14 * 14 * kF32), p2 = blk(Bm * 32 * 7 * 7 * kF32);
    const int64_t i1 = blk(Bm * 16 * 14 * 14 * kI64), i2 = blk(Bm * 32 * 7 * 7 * kI64);
    saved = r1 + i1 + p1 + r2 + i2 + p2 + blk(Bm * 10 * kF32);
    // Stage 1's backward, after stage 2's tensors are gone: max-pool's gradient into ReLU 1's
    // output next to its argmax, then ReLU's gradient next to that one (both r1-sized).
    const int64_t pool1 = r1 + i1 + p1 + r1, relu1 = 3 * r1;
    back = std::max<int64_t>(0, std::max(pool1, relu1) - saved);
  } else {
    throw std::invalid_argument("estimate_classifier_memory: unknown model '" + kind +
                                "'; valid: mlp, cnn");
  }
  // Hybrid keeps its verification probe: probe_batches batches of images and labels.
  if (levers.mode == TrainMode::Hybrid) e.mode_state += levers.probe_batches * images;
  e.activations = images + saved;
  e.transient = back;
  e.peak = e.resident() + e.activations + e.transient;
  // Without grad the same tensors come and go; hybrid verifies on the probe with the gradients
  // freed (sizes scaled, not re-rounded: a few % on small batches).
  if (levers.mode == TrainMode::Hybrid) {
    e.predict_peak = e.resident() - (levers.ranks > 1 ? 0 : e.grads) + levers.probe_batches * saved;
  } else if (levers.mode == TrainMode::Nowcast) {
    e.predict_peak = e.resident() + levers.probe_batches * images +
                     std::max(levers.probe_batches * saved, nowcast_jump(numels_of(params), levers));
  } else {
    e.predict_peak = e.resident() + images + saved;
  }
  e.peak_at = "backward";
  if (levers.mode == TrainMode::Nowcast && e.predict_peak > e.peak) {
    e.peak = e.predict_peak;
    e.peak_at = "a nowcast jump";
  }
  consider_muon_step(e, params, levers);
  return e;
}

int64_t max_gpt_batch(const GPTConfig& model, TrainShape shape, const MemoryLevers& levers,
                      int64_t budget_bytes, int64_t max_batch) {
  // The peak grows with the batch: binary search for the last batch that fits.
  int64_t lo = 0, hi = max_batch;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    shape.batch = mid;
    if (estimate_gpt_memory(model, shape, levers).peak <= budget_bytes)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

namespace {

// The config overrides that turn `from` into `to` (keys of apps/hybrid-train/config_schema.cpp).
std::vector<std::string> lever_overrides(const MemoryLevers& from, const MemoryLevers& to) {
  std::vector<std::string> out;
  if (to.attention != from.attention) out.push_back("model.attention=" + to_string(to.attention));
  if (to.precision != from.precision) out.push_back("train.precision=" + to_string(to.precision));
  if (to.recompute != from.recompute) out.push_back("memory.recompute=" + to_string(to.recompute));
  if (to.recompute == RecomputeLevel::Full && to.recompute_every != from.recompute_every)
    out.push_back("memory.recompute_every=" + std::to_string(to.recompute_every));
  if (to.optimizer != from.optimizer) out.push_back("optim.name=" + to_string(to.optimizer));
  return out;
}

}  // namespace

Recommendation recommend_gpt(const GPTConfig& model, const TrainShape& shape,
                             const MemoryLevers& current, int64_t budget_bytes, bool bf16_is_fast) {
  // Each rung adds one lever to the previous ones, cheapest in step time first.
  std::vector<MemoryLevers> ladder = {current};
  MemoryLevers l = current;
  if (l.attention == AttentionKind::Naive) {
    // No [T, T] probabilities: it drops what selective recompute drops for naive attention
    // (and recomputes its tiles in backward anyway).
    l.attention = AttentionKind::Flash;
    ladder.push_back(l);
  }
  auto try_bf16 = [&] {  // halves the activations
    if (l.precision == Precision::BF16) return;
    l.precision = Precision::BF16;
    ladder.push_back(l);
  };
  if (bf16_is_fast) try_bf16();
  if (l.optimizer == OptimizerKind::AdamW) {
    l.optimizer = OptimizerKind::AdamW8bit;  // ~1.6x optimizer time, 6 B/param less
    ladder.push_back(l);
  }
  if (l.recompute == RecomputeLevel::None) {
    l.recompute = RecomputeLevel::Selective;  // one more GELU and c_proj forward per block
    ladder.push_back(l);
  }
  for (int64_t every : {4, 2, 1}) {  // one more forward of 1/every of the blocks
    if (l.recompute == RecomputeLevel::Full && l.recompute_every <= every) continue;
    l.recompute = RecomputeLevel::Full;
    l.recompute_every = every;
    ladder.push_back(l);
  }
  try_bf16();  // without bf16 instructions: emulated, slower than fp32, so late

  Recommendation r;
  for (size_t i = 0; i < ladder.size(); ++i) {
    // Smaller batches cost throughput: only once every other lever is on.
    const bool last_rung = i + 1 == ladder.size();
    for (int64_t k = 1; k <= shape.batch; ++k) {
      if (shape.batch % k != 0) continue;
      TrainShape s = shape;
      s.batch = shape.batch / k;
      s.grad_accum = shape.grad_accum * k;
      r.levers = ladder[i];
      r.shape = s;
      r.estimate = estimate_gpt_memory(model, s, r.levers);
      r.changes = lever_overrides(current, r.levers);
      if (k > 1) {
        r.changes.push_back("data.batch_size=" + std::to_string(s.batch));
        r.changes.push_back("optim.grad_accum=" + std::to_string(s.grad_accum));
      }
      if (r.estimate.peak <= budget_bytes) {
        r.fits = true;
        return r;
      }
      if (!last_rung) break;
    }
  }
  return r;  // the most frugal settings: the minimum this model and batch need
}

std::string to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::AdamW:
      return "adamw";
    case OptimizerKind::AdamW8bit:
      return "adamw8bit";
    case OptimizerKind::Muon:
      return "muon";
    case OptimizerKind::Sgd:
    case OptimizerKind::SgdMomentum:
      return "sgd";
  }
  return "unknown";
}

std::string to_string(TrainMode mode) {
  switch (mode) {
    case TrainMode::Plain:
      return "plain";
    case TrainMode::Hybrid:
      return "hybrid";
    case TrainMode::Lookahead:
      return "lookahead";
    case TrainMode::Nowcast:
      return "nowcast";
  }
  return "unknown";
}

}  // namespace ht
