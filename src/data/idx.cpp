// IDX reader: big-endian header (0, 0, type, ndim, then ndim uint32 sizes) followed by raw data.
// Every size is checked against the bytes actually present so a truncated download fails loudly.
#include "hybrid/data/idx.h"

#include <torch/torch.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace ht {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes or throws; gzread takes an unsigned int, so large reads go in chunks.
void read_exact(gzFile f, uint8_t* dst, int64_t n, const std::string& path, const char* what) {
  int64_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
    const int got = gzread(f, dst + done, chunk);
    if (got < 0) {
      int err = 0;
      throw std::runtime_error(path + ": cannot decompress " + what + ": " + gzerror(f, &err));
    }
    if (got == 0) {
      throw std::runtime_error(path + ": truncated " + what + ": expected " + std::to_string(n) +
                               " bytes, file ends after " + std::to_string(done));
    }
    done += got;
  }
}

uint32_t big_endian32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

at::Tensor read_idx_gz(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw std::runtime_error(path + ": cannot open IDX file: " + std::strerror(errno));
  gzbuffer(file.get(), 1 << 20);

  std::array<uint8_t, 4> magic{};
  read_exact(file.get(), magic.data(), 4, path, "IDX magic number");
  if (magic[0] != 0 || magic[1] != 0 || magic[3] == 0) {
    throw std::runtime_error(path + ": not an IDX file (bad magic number)");
  }
  if (magic[2] != 0x08) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", magic[2]);
    throw std::runtime_error(path + ": IDX element type " + type + " is not supported; only unsigned bytes (0x08) are");
  }

  const int ndim = magic[3];
  std::vector<uint8_t> header(static_cast<size_t>(4 * ndim));
  read_exact(file.get(), header.data(), 4 * ndim, path, "IDX dimensions");
  std::vector<int64_t> shape(ndim);
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    shape[d] = big_endian32(&header[4 * d]);
    if (shape[d] == 0) throw std::runtime_error(path + ": IDX dimension " + std::to_string(d) + " is 0");
    if (numel > (int64_t{1} << 40) / shape[d]) throw std::runtime_error(path + ": IDX sizes are implausibly large");
    numel *= shape[d];
  }

  at::Tensor data;
  try {
    data = torch::empty(shape, torch::kUInt8);
  } catch (const c10::OutOfMemoryError& e) {
    // Out of memory stays out of memory (a budget too small, usually: sizes past 2^40 were refused
    // above), with what was being loaded. {}: the empty backtrace (see allocator.cpp).
    throw c10::OutOfMemoryError(path + ": loading its " + std::to_string(numel) + " bytes of data: " +
                                    e.what_without_backtrace(),
                                {});
  } catch (const c10::Error& e) {  // a corrupt header can claim anything
    throw std::runtime_error(path + ": its header claims " + std::to_string(numel) +
                             " bytes of data, which cannot be allocated (corrupt file?): " +
                             e.what_without_backtrace());
  }
  read_exact(file.get(), data.data_ptr<uint8_t>(), numel, path, "IDX data");
  uint8_t extra = 0;
  if (gzread(file.get(), &extra, 1) != 0) {
    throw std::runtime_error(path + ": IDX file has bytes beyond its declared " + std::to_string(numel) +
                             " elements");
  }
  return data;
}

}  // namespace ht
