// Loading token corpora: byte-level text files, and uint16 token files memory-mapped in place.
// Errors name the file and say what was expected, since users bring their own corpora here.
#include "hybrid/data/token_corpus.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace ht {
namespace {

// llm.c's token files start with int32[256]: magic, version, token count.
constexpr int64_t kLlmcHeaderBytes = 256 * 4;
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcMagicUint32 = 20240801;  // llm.c's Llama-3 files hold uint32 ids

std::runtime_error io_error(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}

void require_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("corpus file not found: " + path);
  if (!std::filesystem::is_regular_file(path)) throw std::runtime_error("corpus path is not a file: " + path);
}

std::shared_ptr<const uint16_t> share(std::vector<uint16_t> tokens) {
  auto owner = std::make_shared<std::vector<uint16_t>>(std::move(tokens));
  return std::shared_ptr<const uint16_t>(owner, owner->data());  // aliasing: keeps the vector alive
}

int32_t little_endian32(const uint8_t* b) {
  return static_cast<int32_t>(uint32_t{b[0]} | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) |
                              (uint32_t{b[3]} << 24));
}

// Maps the whole file read-only. The returned pointer owns the mapping.
std::shared_ptr<const uint8_t> map_file(const std::string& path, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error(path, "cannot open");
  void* base = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping stays valid after close
  if (base == MAP_FAILED) throw io_error(path, "cannot mmap");
  const size_t length = static_cast<size_t>(bytes);
  return std::shared_ptr<const uint8_t>(static_cast<const uint8_t*>(base),
                                        [length](const uint8_t* p) { ::munmap(const_cast<uint8_t*>(p), length); });
}

}  // namespace

TokenCorpus::TokenCorpus(std::shared_ptr<const uint16_t> tokens, int64_t size, int64_t vocab_size, std::string name)
    : tokens_(std::move(tokens)), size_(size), vocab_size_(vocab_size), name_(std::move(name)) {}

TokenCorpus TokenCorpus::from_bytes(std::string_view bytes, std::string name) {
  if (bytes.empty()) throw std::runtime_error("corpus " + name + " is empty");
  std::vector<uint16_t> tokens(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<uint8_t>(bytes[i]);  // no sign extension
  const auto size = static_cast<int64_t>(tokens.size());
  return TokenCorpus(share(std::move(tokens)), size, 256, std::move(name));
}

TokenCorpus TokenCorpus::from_text_file(const std::string& path) {
  require_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error(path, "cannot open");
  std::vector<uint16_t> tokens;
  tokens.reserve(static_cast<size_t>(std::filesystem::file_size(path)));
  // Chunked, so a large file never sits in memory twice (once as bytes, once as tokens).
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) tokens.push_back(static_cast<uint8_t>(chunk[i]));
  }
  if (in.bad()) throw io_error(path, "read failed");
  if (tokens.empty()) throw std::runtime_error("corpus " + path + " is empty");
  const auto size = static_cast<int64_t>(tokens.size());
  return TokenCorpus(share(std::move(tokens)), size, 256, path);
}

TokenCorpus TokenCorpus::from_token_file(const std::string& path, int64_t vocab_size) {
  require_file(path);
  if (vocab_size < 0 || vocab_size > 65536) {
    throw std::invalid_argument("token file " + path + ": vocab_size " + std::to_string(vocab_size) +
                                " does not fit uint16 ids (1..65536, or 0 to infer)");
  }
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  if (bytes == 0) throw std::runtime_error("corpus " + path + " is empty");
  if (bytes % 2 != 0) {
    throw std::runtime_error("token file " + path + " has " + std::to_string(bytes) +
                             " bytes, an odd count: it is not a file of uint16 token ids");
  }
  std::shared_ptr<const uint8_t> file = map_file(path, bytes);

  int64_t offset = 0;
  if (bytes >= kLlmcHeaderBytes) {
    const int32_t magic = little_endian32(file.get());
    if (magic == kLlmcMagicUint32) {
      throw std::runtime_error("token file " + path + " is an llm.c file of uint32 ids (Llama 3); only uint16 ids are supported");
    }
    if (magic == kLlmcMagic) {
      const int32_t version = little_endian32(file.get() + 4);
      const int64_t count = little_endian32(file.get() + 8);
      if (version != 1 || count != (bytes - kLlmcHeaderBytes) / 2) {
        throw std::runtime_error("token file " + path + " has an llm.c header (magic 20240520) but version " +
                                 std::to_string(version) + " and token count " + std::to_string(count) +
                                 " do not match its " + std::to_string(bytes) + " bytes");
      }
      offset = kLlmcHeaderBytes;
    }
  }
  const int64_t size = (bytes - offset) / 2;
  if (size == 0) throw std::runtime_error("corpus " + path + " holds a header but no tokens");

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  // The file's bytes are the ids; alias the mapping instead of copying it.
  std::shared_ptr<const uint16_t> tokens(file, reinterpret_cast<const uint16_t*>(file.get() + offset));
#else
  std::vector<uint16_t> swapped(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const uint8_t* b = file.get() + offset + 2 * i;
    swapped[i] = static_cast<uint16_t>(b[0] | (b[1] << 8));
  }
  std::shared_ptr<const uint16_t> tokens = share(std::move(swapped));
#endif

  const uint16_t* first = tokens.get();
  const uint16_t* largest = std::max_element(first, first + size);
  if (vocab_size == 0) {
    vocab_size = int64_t{*largest} + 1;
  } else if (*largest >= vocab_size) {
    throw std::runtime_error("token file " + path + " holds id " + std::to_string(*largest) + " at token " +
                             std::to_string(largest - first) + ", not below vocab_size " + std::to_string(vocab_size));
  }
  return TokenCorpus(std::move(tokens), size, vocab_size, path);
}

TokenCorpus TokenCorpus::from_tokens(std::vector<uint16_t> tokens, int64_t vocab_size, std::string name) {
  if (tokens.empty()) throw std::runtime_error("corpus " + name + " is empty");
  if (vocab_size <= 0 || vocab_size > 65536) {
    throw std::invalid_argument("corpus " + name + ": vocab_size must be in 1..65536, got " + std::to_string(vocab_size));
  }
  const uint16_t largest = *std::max_element(tokens.begin(), tokens.end());
  if (largest >= vocab_size) {
    throw std::invalid_argument("corpus " + name + " holds id " + std::to_string(largest) + ", not below vocab_size " +
                                std::to_string(vocab_size));
  }
  const auto size = static_cast<int64_t>(tokens.size());
  return TokenCorpus(share(std::move(tokens)), size, vocab_size, std::move(name));
}

at::Tensor TokenCorpus::slice(int64_t begin, int64_t length) const {
  if (begin < 0 || length < 0 || begin + length > size_) {
    throw std::out_of_range("corpus " + name_ + ": slice [" + std::to_string(begin) + ", " +
                            std::to_string(begin + length) + ") outside its " + std::to_string(size_) + " tokens");
  }
  at::Tensor out = torch::empty({length}, torch::kInt64);  // [length]
  std::copy_n(data() + begin, length, out.data_ptr<int64_t>());
  return out;
}

void write_token_file(const std::string& path, const uint16_t* tokens, int64_t count) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw io_error(tmp, "cannot create");
    std::vector<uint8_t> chunk;
    for (int64_t begin = 0; begin < count; begin += 1 << 20) {
      const int64_t n = std::min<int64_t>(count - begin, 1 << 20);
      chunk.resize(static_cast<size_t>(2 * n));
      for (int64_t i = 0; i < n; ++i) {  // explicit little-endian, whatever the host order
        chunk[2 * i] = static_cast<uint8_t>(tokens[begin + i] & 0xFF);
        chunk[2 * i + 1] = static_cast<uint8_t>(tokens[begin + i] >> 8);
      }
      out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(chunk.size()));
    }
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw io_error(tmp, "write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw io_error(path, "cannot move " + tmp + " into place");
  }
}

}  // namespace ht
