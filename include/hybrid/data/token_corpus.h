// A token sequence for language modelling: the raw bytes of a text file (vocab 256) or a file of
// little-endian uint16 token ids (e.g. GPT-2 BPE). Two bytes per token; token files are mmapped.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ht {

class TokenCorpus {
 public:
  // Every byte is a token (vocab 256). name is used in error messages.
  static TokenCorpus from_bytes(std::string_view bytes, std::string name = "<memory>");
  // Raw bytes of any file, usually UTF-8 text (vocab 256).
  static TokenCorpus from_text_file(const std::string& path);
  // Little-endian uint16 ids, header-less, or with llm.c's 1024-byte header (magic 20240520,
  // version 1), which is detected and skipped. vocab_size 0 = largest id + 1; otherwise every id
  // is checked to be below it. The file is memory-mapped, so a 1 GB file costs page cache, not heap.
  static TokenCorpus from_token_file(const std::string& path, int64_t vocab_size = 0);
  static TokenCorpus from_tokens(std::vector<uint16_t> tokens, int64_t vocab_size,
                                 std::string name = "<memory>");

  int64_t size() const { return size_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& name() const { return name_; }
  const uint16_t* data() const { return tokens_.get(); }
  uint16_t operator[](int64_t i) const { return tokens_.get()[i]; }
  at::Tensor slice(int64_t begin, int64_t length) const;  // [length] int64, a copy

 private:
  TokenCorpus(std::shared_ptr<const uint16_t> tokens, int64_t size, int64_t vocab_size, std::string name);

  std::shared_ptr<const uint16_t> tokens_;  // shared: copies of a corpus are cheap
  int64_t size_ = 0;
  int64_t vocab_size_ = 0;
  std::string name_;
};

// Writes ids as a header-less little-endian uint16 file (what from_token_file reads), atomically.
void write_token_file(const std::string& path, const uint16_t* tokens, int64_t count);

}  // namespace ht
