// Mean / std of a parameter over its recorded states, and the float32 (de)normalisation the
// models see. The operation order matches bench/python/nino_reference.py.
#include "tensor_scale.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

namespace ht::nowcast {

TensorScale tensor_scale(const std::vector<at::Tensor>& states, int64_t chunk) {
  const int64_t n = states.front().numel();
  const double total = static_cast<double>(n) * static_cast<double>(states.size());
  double sum = 0.0;
  for (const auto& s : states) {  // at::sum(s, kDouble) would first copy all of s to float64
    for (int64_t a = 0; a < n; a += chunk) {
      sum += s.narrow(0, a, std::min(chunk, n - a)).to(at::kDouble).sum().item<double>();
    }
  }
  TensorScale scale;
  scale.mean = sum / total;
  double sq = 0.0;
  for (const auto& s : states) {
    for (int64_t a = 0; a < n; a += chunk) {
      const at::Tensor d = s.narrow(0, a, std::min(chunk, n - a)).to(at::kDouble) - scale.mean;
      sq += at::dot(d, d).item<double>();
    }
  }
  scale.std = total > 1 ? std::sqrt(sq / (total - 1.0)) : NAN;
  return scale;
}

at::Tensor normalised_rows(const std::vector<at::Tensor>& states, int64_t first, int64_t count,
                           const TensorScale& scale) {
  std::vector<at::Tensor> cols;
  cols.reserve(states.size());
  for (const auto& s : states) cols.push_back(s.narrow(0, first, count));
  const at::Tensor x = at::stack(cols, 1);  // [count, 5]
  return (x - scale.mean) / (scale.std + kNormEps);
}

void denormalise_into(const at::Tensor& out, const at::Tensor& x, const TensorScale& scale) {
  at::Tensor o = out;  // a handle to the caller's storage
  at::mul_out(o, x, at::scalar_tensor(scale.std, at::kDouble));
  o.add_(scale.mean);
}

}  // namespace ht::nowcast
