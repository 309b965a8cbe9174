// Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is scalable"): the weight matrices step along
// their orthogonalized Nesterov momentum, every other parameter takes AdamW's step, one rate for both.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/kernels/optimizers.h"

namespace ht {

struct MuonOptions {
  // The rate, decay, betas and eps of the AdamW part; the matrices share lr and weight_decay.
  AdamWOptions adamw;
  double momentum = 0.95;  // Nesterov momentum of the matrices' gradients
  int64_t ns_steps = 5;    // Newton-Schulz iterations of the orthogonalization
  // The iterations' matmuls in bf16 (Jordan's reference does so): on an AVX512-BF16 EPYC the tiny
  // GPT's step costs 1.17x AdamW's instead of 1.31x (BENCHMARKS.md 9); the result is within ~8 % of
  // fp32's (relative norm, tested). Slow where the CPU has no bf16 arithmetic (AVX2 only).
  bool ns_bf16 = false;
};

// What a parameter gets. A matrix (2-D, or a conv kernel [out, in, kh, kw] seen as [out, in*kh*kw])
// may be orthogonalized in column blocks: GPT-2's c_attn [C, 3C] as its q, k and v thirds.
struct MuonParam {
  at::Tensor tensor;
  bool orthogonalize = false;  // false: AdamW's step (embeddings, biases, norm gains)
  int64_t column_blocks = 1;
};

// Validates like make_adamw (plus momentum in [0, 1), ns_steps >= 1, blocks dividing the columns).
// The matrices' step is lr * 0.2 * sqrt(max(rows, cols)) * O, O the orthogonalized momentum:
// Liu et al.'s scale, which gives it the RMS of a typical AdamW step, so AdamW's rate carries over.
std::unique_ptr<Optimizer> make_muon(std::vector<MuonParam> params, const MuonOptions& options);

// O = U V^T of m = U S V^T, approximated by NS quintic iterations (Jordan's coefficients, which
// leave singular values in ~[0.7, 1.2] rather than exactly 1). m: [rows, cols], float32; the
// iterations run in `dtype` (float32 or bfloat16), the result is float32.
at::Tensor orthogonalize_newton_schulz(const at::Tensor& m, int64_t steps, at::ScalarType dtype = at::kFloat);

}  // namespace ht
