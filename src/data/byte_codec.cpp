// Byte-level encoding: text bytes are token ids 0..255 and back.
// Decoding rejects larger ids instead of truncating them, which would print plausible garbage.
#include "hybrid/data/byte_codec.h"

#include <torch/torch.h>

#include <stdexcept>

namespace ht {
namespace {

char to_byte(int64_t id) {
  if (id < 0 || id > 255) {
    throw std::invalid_argument("decode_bytes: token id " + std::to_string(id) +
                                " is not a byte (0..255); this is not a byte-level vocabulary");
  }
  return static_cast<char>(static_cast<uint8_t>(id));
}

}  // namespace

at::Tensor encode_bytes(std::string_view text) {
  at::Tensor out = torch::empty({static_cast<int64_t>(text.size())}, torch::kInt64);  // [len]
  int64_t* ids = out.data_ptr<int64_t>();
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return out;
}

std::string decode_bytes(const at::Tensor& tokens) {
  if (at::isFloatingType(tokens.scalar_type()) || tokens.scalar_type() == at::kBool) {
    throw std::invalid_argument("decode_bytes: expected an integer tensor of token ids, got " +
                                std::string(c10::toString(tokens.scalar_type())));
  }
  at::Tensor flat = tokens.to(torch::kCPU, torch::kInt64).contiguous().view(-1);  // [n]
  const int64_t* ids = flat.data_ptr<int64_t>();
  std::string text(static_cast<size_t>(flat.numel()), '\0');
  for (int64_t i = 0; i < flat.numel(); ++i) text[i] = to_byte(ids[i]);
  return text;
}

std::string decode_bytes(const std::vector<int64_t>& tokens) {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) text[i] = to_byte(tokens[i]);
  return text;
}

}  // namespace ht
