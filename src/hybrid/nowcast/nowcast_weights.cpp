// Weight-file checks for WNN+ and NiNo: the project's safetensors reader parses, this file says
// which tensor is missing or misshapen and which released file to use instead.
#include "nowcast_weights.h"

#include <filesystem>

#include <ATen/ATen.h>

#include "hybrid/core/safetensors.h"
#include "hybrid/hybrid/nowcast.h"

namespace ht::nowcast {
namespace {

std::string shape_str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + (shape[i] < 0 ? std::string("*") : std::to_string(shape[i]));
  }
  return s + "]";
}

}  // namespace

WeightFile::WeightFile(const std::string& path, const std::string& what,
                       const std::string& expected_file)
    : path_(path), what_(what), expected_file_(expected_file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw NowcastError(what + " weights: no file '" + path + "'; use " + expected_file +
                       " in this repository (models/nino/README.md, models/own/README.md)");
  }
  try {
    tensors_ = load_safetensors(path);
  } catch (const SafetensorsError& e) {
    throw NowcastError(what + " weights: " + e.what() + "; expected " + expected_file);
  }
}

at::Tensor WeightFile::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw NowcastError(what_ + " weights '" + path_ + "': tensor '" + name +
                       "' is missing, so this is not a " + what_ + " checkpoint; use " +
                       expected_file_);
  }
  const at::Tensor& t = it->second;
  bool ok = t.dim() == static_cast<int64_t>(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || t.size(i) == shape[i];
  if (!ok) {
    throw NowcastError(what_ + " weights '" + path_ + "': tensor '" + name + "' has shape " +
                       shape_str(t.sizes()) + ", expected " + shape_str(shape) + "; use " +
                       expected_file_);
  }
  return t.to(at::kFloat).contiguous();
}

}  // namespace ht::nowcast
