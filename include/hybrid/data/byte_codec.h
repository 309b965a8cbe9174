// Byte-level tokens: one token per byte, vocab 256. Turns prompts into model input and generated
// token ids back into text.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ht {

constexpr int64_t kByteVocab = 256;  // token ids 0..255

at::Tensor encode_bytes(std::string_view text);  // [len] int64, values 0..255

// Throws std::invalid_argument if an id is outside 0..255 (i.e. not a byte-level token).
std::string decode_bytes(const at::Tensor& tokens);  // any integer tensor, read in flat order
std::string decode_bytes(const std::vector<int64_t>& tokens);

}  // namespace ht
