// Reading a nowcasting model's weights from safetensors, checking every tensor's presence and
// shape, with errors that name the file, the tensor and the fix.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht::nowcast {

class WeightFile {
 public:
  // `what` names the model ("WNN+"), `expected_file` the released file it should be.
  WeightFile(const std::string& path, const std::string& what, const std::string& expected_file);
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  // The tensor, float32 contiguous; throws NowcastError when missing or of another shape
  // (-1 in `shape` accepts any size there).
  at::Tensor get(const std::string& name, const std::vector<int64_t>& shape) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_, what_, expected_file_;
  std::map<std::string, at::Tensor> tensors_;
};

}  // namespace ht::nowcast
