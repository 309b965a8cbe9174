// AdamW with 8-bit block-wise quantized moments (bitsandbytes' Adam8bit on the CPU): ~2 bytes of
// state per parameter instead of 8, same update rule as ht::make_adamw.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/kernels/optimizers.h"

namespace ht {

struct AdamW8bitOptions {
  // Values sharing one fp32 absmax. 256 rather than bitsandbytes' 2048: every value's error is
  // bounded by the largest of its 256 neighbours instead of 2048, so one outlier coarsens 8x
  // fewer values, for 2.03 instead of 2.004 bytes/param. (On the golden test both sizes end
  // within 0.2 % of fp32 AdamW; tests/memory runs both.)
  int64_t block_size = 256;
  // Smaller tensors (biases, norm gains) keep fp32 moments: they are a negligible share of the
  // state and the most sensitive to quantization error.
  int64_t min_quantized_numel = 4096;
  // How updated moments are rounded to the code. Nearest is bitsandbytes' rule, but it drops
  // every change smaller than half a code gap (0.35-3.5 % of the value near the absmax), and an
  // EMA with beta2 = 0.999 moves v by about 0.1 % a step: measured along a run's own gradients,
  // v ends 7-10 % below an fp32 shadow after 100-200 steps, the steps are too large, and the
  // golden test's loss ends 3 % below fp32 AdamW's (like a 5 % larger lr). Stochastic rounding
  // picks the upper neighbour with probability proportional to the distance, so the stored
  // moments are unbiased (v within 0.1 %, loss within 0.2 %), at ~1.7x the step time of Nearest.
  // Its random numbers come from a hash of (step, tensor, element): identical for any thread
  // count and after save/load.
  enum class Rounding { Stochastic, Nearest };
  Rounding rounding = Rounding::Stochastic;
};

class AdamW8bit final : public SingleRateOptimizer {
 public:
  // params: float32, contiguous tensors (module parameters are; fp32 master weights), on any one
  // device. State is allocated here, on the parameters' device, so state_bytes() is known before
  // the first step.
  AdamW8bit(std::vector<at::Tensor> params, const AdamWOptions& opts,
            const AdamW8bitOptions& quant = {});

  // One fused pass per block: dequantize m and v, update them and the parameter (with the fp32
  // moments), requantize them with the block's new absmax. If any gradient holds NaN or Inf the
  // whole step is skipped (weights, moments and the step count untouched) and skipped_steps()
  // grows.
  void step() override;
  void zero_grad() override;
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  int64_t state_bytes() const override;
  std::string name() const override { return "adamw8bit"; }

  int64_t steps_taken() const { return step_; }
  int64_t skipped_steps() const { return skipped_; }
  bool is_quantized(size_t param_index) const { return states_.at(param_index).quantized; }

  // The moments of one parameter, dequantized to fp32 (for tests and diagnostics).
  at::Tensor first_moment(size_t param_index) const;
  at::Tensor second_moment(size_t param_index) const;

 private:
  struct State {
    bool quantized = false;
    at::Tensor m_codes, v_codes;    // uint8 [numel]
    at::Tensor m_absmax, v_absmax;  // float [num_blocks]
    at::Tensor m, v;                // float [numel], when not quantized
  };
  // The step of one parameter, chosen per parameter from a table (adamw8bit.cpp): cpu_step for
  // float32 CPU tensors, aten_step (ATen ops, the same code and counter-based rounding) for any
  // other device or a non-contiguous gradient.
  void cpu_step(size_t index, float decay, float step_size, float inv_sqrt_bc2);
  void aten_step(size_t index, float decay, float step_size, float inv_sqrt_bc2);
  void quantized_step(size_t index, float decay, float step_size, float inv_sqrt_bc2);
  void fp32_step(at::Tensor& p, const at::Tensor& g, State& s, float decay, float step_size,
                 float inv_sqrt_bc2);

  std::vector<at::Tensor> params_;
  std::vector<State> states_;
  AdamWOptions opts_;
  AdamW8bitOptions quant_;
  int64_t step_ = 0;
  int64_t skipped_ = 0;
};

std::unique_ptr<AdamW8bit> make_adamw8bit(std::vector<at::Tensor> params, const AdamWOptions& opts,
                                          const AdamW8bitOptions& quant = {});

}  // namespace ht
