// Per-tensor normalisation of the nowcasting models: each parameter tensor is centred and scaled
// by the mean and standard deviation of all its values in all 5 states, as the reference does.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht::nowcast {

constexpr double kNormEps = 1e-6;  // (w - mean) / (std + eps); mapped back with w * std + mean

struct TensorScale {
  double mean = 0.0;
  double std = 0.0;  // unbiased, over the 5 x numel values
};

// states: the 5 states of one tensor, flattened [numel] float32. Two passes in float64, `chunk`
// elements at a time, so no temporary grows with the tensor.
TensorScale tensor_scale(const std::vector<at::Tensor>& states, int64_t chunk);

// Rows [first, first + count) of the normalised states: [count, 5] float32.
at::Tensor normalised_rows(const std::vector<at::Tensor>& states, int64_t first, int64_t count,
                           const TensorScale& scale);

// out = x * std + mean, written into out (float32, same size as x).
void denormalise_into(const at::Tensor& out, const at::Tensor& x, const TensorScale& scale);

}  // namespace ht::nowcast
