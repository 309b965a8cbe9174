// Reading and writing the safetensors format (8-byte little-endian header length N, N bytes of
// JSON {name: {dtype, shape, data_offsets}}, then the raw little-endian tensor bytes).
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ht {

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes CPU tensors of dtype float32, float16, bfloat16, float64, int64, int32, int16, int8,
// uint8 or bool (stored as F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL), in the given order.
// Names must be unique and non-empty; "__metadata__" is reserved. Writes to path + ".tmp" first,
// then renames, so a crash never leaves a half-written file under `path`.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor, by name. F16 and BF16 are converted to float32; other dtypes keep theirs.
// Validates the header length against the file size, the JSON, every dtype and shape, and that
// data_offsets match shape x dtype size, stay inside the file, and tile the data without overlap
// or gaps. Errors are SafetensorsError naming the file and, where it applies, the tensor.
std::map<std::string, at::Tensor> load_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace ht
