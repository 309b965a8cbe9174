// Rollback buffers: one copy of a list of tensors, allocated once, refreshed and restored with
// copy_ (bit-exact). Optionally kept in host memory when the tensors live on an accelerator.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch {
namespace serialize { class OutputArchive; class InputArchive; }
}  // namespace torch

namespace ht {

class WeightSnapshot {
 public:
  // Allocates the buffers (shapes and dtypes of `tensors`). Calling it again is a no-op.
  void allocate(const std::vector<at::Tensor>& tensors, bool on_host);
  bool allocated() const { return !buffers_.empty() || allocated_empty_; }

  void capture(const std::vector<at::Tensor>& tensors);        // buffers := tensors
  void restore(const std::vector<at::Tensor>& tensors);        // tensors := buffers, in place
  bool valid() const { return valid_; }                        // captured at least once

  int64_t bytes() const { return bytes_; }                     // buffer size
  int64_t bytes_copied() const { return bytes_copied_; }       // capture + restore traffic
  int64_t captures() const { return captures_; }
  int64_t restores() const { return restores_; }

  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);  // after allocate(): copies into the buffers

 private:
  void check_match(const std::vector<at::Tensor>& tensors, const char* what) const;

  std::vector<at::Tensor> buffers_;
  bool allocated_empty_ = false;
  bool valid_ = false;
  int64_t bytes_ = 0;
  int64_t bytes_copied_ = 0;
  int64_t captures_ = 0;
  int64_t restores_ = 0;
};

}  // namespace ht
