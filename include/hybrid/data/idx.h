// Reader for IDX files (the MNIST family's format), gzip-compressed or plain.
// Used by the Fashion-MNIST loader; public so other IDX data sets can reuse it.
#pragma once

#include <ATen/core/Tensor.h>
#include <string>

namespace ht {

// Reads an unsigned-byte IDX file (type code 0x08) into a uint8 tensor with the file's shape,
// e.g. [60000, 28, 28] for images or [60000] for labels. zlib reads plain files too.
// Throws std::runtime_error naming the path on a missing file, bad magic, or a size mismatch.
at::Tensor read_idx_gz(const std::string& path);

}  // namespace ht
