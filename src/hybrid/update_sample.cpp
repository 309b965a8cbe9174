// Strided element samples of per-parameter tensors (see update_sample.h): views into the
// flattened tensor, copied into small preallocated buffers.
#include "hybrid/update_sample.h"

#include <algorithm>

#include <ATen/ATen.h>

namespace ht {

void UpdateSampler::init(const std::vector<at::Tensor>& like, int64_t per_tensor) {
  stride_.clear();
  size_.clear();
  for (const auto& t : like) {
    int64_t stride = std::max<int64_t>(1, t.numel() / per_tensor);
    if (stride > 1 && stride % 2 == 0) ++stride;
    stride_.push_back(stride);
    size_.push_back((t.numel() + stride - 1) / stride);
  }
}

at::Tensor UpdateSampler::view(const at::Tensor& t, size_t i) const {
  return t.reshape({-1}).slice(0, 0, t.numel(), stride_[i]);
}

std::vector<at::Tensor> UpdateSampler::make_buffers(const std::vector<at::Tensor>& like) const {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < like.size(); ++i) out.push_back(at::zeros({size_[i]}, like[i].options().requires_grad(false)));
  return out;
}

void UpdateSampler::gather(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) const {
  for (size_t i = 0; i < ts.size(); ++i) out[i].copy_(view(ts[i], i));
}

void UpdateSampler::gather_minus(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) const {
  for (size_t i = 0; i < ts.size(); ++i) out[i].neg_().add_(view(ts[i], i));
}

}  // namespace ht
