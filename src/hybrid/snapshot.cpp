// Rollback buffers. Allocated once; capture and restore are copy_ per tensor, so a rollback is
// bit-exact and costs one pass over the weights with no allocation.
#include "hybrid/snapshot.h"

#include <torch/torch.h>

#include <stdexcept>

#include "archive_io.h"

namespace ht {

void WeightSnapshot::allocate(const std::vector<at::Tensor>& tensors, bool on_host) {
  if (allocated()) return;
  buffers_.reserve(tensors.size());
  for (const auto& t : tensors) {
    auto opts = t.options().requires_grad(false);
    if (on_host) opts = opts.device(torch::kCPU);
    buffers_.push_back(torch::empty(t.sizes(), opts));
    bytes_ += t.numel() * static_cast<int64_t>(t.element_size());
  }
  allocated_empty_ = tensors.empty();
}

void WeightSnapshot::check_match(const std::vector<at::Tensor>& tensors, const char* what) const {
  if (tensors.size() != buffers_.size()) {
    throw std::logic_error(std::string("WeightSnapshot::") + what + ": " +
                           std::to_string(tensors.size()) + " tensors, the snapshot was allocated for " +
                           std::to_string(buffers_.size()));
  }
}

void WeightSnapshot::capture(const std::vector<at::Tensor>& tensors) {
  check_match(tensors, "capture");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) buffers_[i].copy_(tensors[i]);
  valid_ = true;
  bytes_copied_ += bytes_;
  ++captures_;
}

void WeightSnapshot::restore(const std::vector<at::Tensor>& tensors) {
  check_match(tensors, "restore");
  if (!valid_) throw std::logic_error("WeightSnapshot::restore: nothing captured yet");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(buffers_[i]);
  bytes_copied_ += bytes_;
  ++restores_;
}

void WeightSnapshot::save(torch::serialize::OutputArchive& archive) const {
  archive_io::put(archive, "valid", valid_);
  archive_io::put(archive, "bytes_copied", bytes_copied_);
  archive_io::put(archive, "captures", captures_);
  archive_io::put(archive, "restores", restores_);
  if (valid_) archive_io::put_tensors(archive, "buf", buffers_);
}

void WeightSnapshot::load(torch::serialize::InputArchive& archive) {
  valid_ = archive_io::get_bool(archive, "valid");
  bytes_copied_ = archive_io::get_int(archive, "bytes_copied");
  captures_ = archive_io::get_int(archive, "captures");
  restores_ = archive_io::get_int(archive, "restores");
  if (!valid_) return;
  const bool fresh = buffers_.empty();  // loaded before allocate(): the archive defines the shapes
  archive_io::get_tensors_into(archive, "buf", buffers_);
  if (fresh) {
    bytes_ = 0;
    for (const auto& b : buffers_) bytes_ += b.numel() * static_cast<int64_t>(b.element_size());
  }
}

}  // namespace ht
