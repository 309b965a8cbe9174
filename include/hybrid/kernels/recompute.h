// Activation recompute (gradient checkpointing) for LibTorch C++, which has none (pytorch#52744):
// a region's forward keeps only its input; backward re-runs the region and backprops through it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht {

using RecomputeFn = std::function<at::Tensor(const at::Tensor&)>;

// y = fn(input), but the activations inside fn are freed after forward: only `input` (and the
// CPU RNG state) is saved. Backward re-runs fn with grad enabled on a detached copy of input and
// backprops the incoming gradient through it; the gradient of every leaf fn uses (its module's
// parameters) is accumulated into that leaf's .grad() exactly as without recompute, and the input
// gradient flows on to the rest of the graph.
//
// RNG: the CPU generator state at forward time is restored around the re-run and put back
// afterwards, so dropout inside fn draws the same masks in both runs and the RNG stream seen by
// the rest of training is the same as without recompute.
//
// Backward can only reach this region if something it depends on requires grad. When input does
// not (e.g. the first layer fed with data), pass the parameters fn uses as `params`; with neither,
// fn simply runs without recompute. Without grad mode (evaluation) fn runs directly, no graph.
// fn must be a pure function of its input and parameters: no in-place change of outside state.
// Use backward(): like PyTorch's reentrant checkpoint, torch::autograd::grad() cannot return the
// gradient of a parameter used inside fn (and still accumulates into its .grad()), and there is
// no double backward (create_graph) through a recomputed region.
at::Tensor recompute(RecomputeFn fn, const at::Tensor& input);
at::Tensor recompute(RecomputeFn fn, const at::Tensor& input,
                     const std::vector<at::Tensor>& params);

// linear(gelu_tanh(x), weight, bias) saving only x: the GELU output (as large as x) is rebuilt in
// backward instead of being kept for the projection's weight gradient. This is what "recompute
// GELU" means in a GPT MLP (x = c_fc output, [B, T, 4C]; weight = c_proj [C, 4C]). A lone
// recomputed GELU would save nothing: GELU's backward needs only x, and the consumer of its output
// keeps that output anyway. bias may be undefined.
at::Tensor recompute_gelu_linear(const at::Tensor& x, const at::Tensor& weight,
                                 const at::Tensor& bias);

// How much a model recomputes. Numbers follow llm.c's -r flag.
enum class RecomputeLevel {
  None = 0,       // keep every activation: fastest, most memory
  Selective = 1,  // recompute the cheap ops with large outputs: attention core (flash_attention
                  // does this by construction) and the MLP's GELU output (c_proj's input)
  Full = 2,       // recompute whole blocks (recompute(block_forward, x, block_params)) every
                  // every_n_layers-th layer; the other layers run plain
};
RecomputeLevel parse_recompute_level(const std::string& name);  // none|selective|full or 0|1|2
std::string to_string(RecomputeLevel level);

// What a model asks, layer by layer. In a GPT block:
//   x = policy.recompute_block(l) ? recompute(block_fn, x, block_params) : block_fn(x);
// and inside block_fn the MLP uses recompute_gelu_linear when recompute_gelu(l).
struct RecomputePolicy {
  RecomputeLevel level = RecomputeLevel::None;
  int every_n_layers = 1;  // Full only: blocks 0, n, 2n, ... are recomputed; must be >= 1

  void validate() const;  // throws std::invalid_argument on every_n_layers < 1
  bool recompute_block(int layer) const;
  // Selective only: Full's other layers run plain, which keeps the planner's model simple.
  bool recompute_gelu(int layer) const;
};

}  // namespace ht
