// Strided element samples of per-parameter tensors. A cosine or relative error between two
// model-sized updates, measured on a few thousand elements per tensor, without model-sized copies.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht {

class UpdateSampler {
 public:
  // Picks a stride per tensor so each sample holds about `per_tensor` elements (all of a small
  // tensor). Strides are odd so that rows of power-of-two widths are not hit in the same columns.
  void init(const std::vector<at::Tensor>& like, int64_t per_tensor = 4096);
  bool ready() const { return !stride_.empty(); }

  // Zeros, one sample-sized buffer per tensor, with that tensor's dtype and device.
  std::vector<at::Tensor> make_buffers(const std::vector<at::Tensor>& like) const;
  // out[i] := the sample of ts[i]
  void gather(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) const;
  // out[i] := sample of ts[i] - out[i] (turns a sample taken before an update into the update's)
  void gather_minus(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) const;

 private:
  at::Tensor view(const at::Tensor& t, size_t i) const;  // [ceil(numel / stride)]

  std::vector<int64_t> stride_;
  std::vector<int64_t> size_;  // elements in sample i
};

}  // namespace ht
