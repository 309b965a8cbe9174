// Loading Fashion-MNIST from its gzipped IDX files, with a per-process cache keyed by directory.
// The cache holds weak references: the data lives as long as some source uses it, and no longer.
#include "hybrid/data/fashion_mnist.h"

#include <torch/torch.h>

#include <array>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

#include "hybrid/data/idx.h"

namespace ht {
namespace {

const char* kInstallHint = "install it with: apt-get install dataset-fashion-mnist";

std::string require_file(const std::string& dir, const char* name) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  if (!std::filesystem::is_directory(dir)) {
    throw std::runtime_error("Fashion-MNIST directory not found: " + dir + "; " + kInstallHint);
  }
  if (!std::filesystem::is_regular_file(path)) {
    throw std::runtime_error("Fashion-MNIST file not found: " + path + "; " + kInstallHint);
  }
  return path;
}

LabeledImages load_split(const std::string& dir, const char* images_name, const char* labels_name) {
  const std::string images_path = require_file(dir, images_name);
  const std::string labels_path = require_file(dir, labels_name);
  at::Tensor images = read_idx_gz(images_path);  // [N, 28, 28] uint8
  at::Tensor labels = read_idx_gz(labels_path);  // [N] uint8
  if (images.dim() != 3 || images.size(1) != 28 || images.size(2) != 28) {
    throw std::runtime_error(images_path + ": expected images of shape [N, 28, 28], got " +
                             c10::str(images.sizes()));
  }
  if (labels.dim() != 1 || labels.size(0) != images.size(0)) {
    throw std::runtime_error(labels_path + ": expected " + std::to_string(images.size(0)) +
                             " labels to match " + images_path + ", got shape " + c10::str(labels.sizes()));
  }
  if (labels.max().item<int64_t>() > 9) {
    throw std::runtime_error(labels_path + ": label values above 9; not a Fashion-MNIST label file");
  }
  return {images.unsqueeze(1), labels.to(torch::kInt64)};
}

}  // namespace

std::shared_ptr<const FashionMnist> load_fashion_mnist(const std::string& dir) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const FashionMnist>> cache;
  std::error_code error;
  std::string key = std::filesystem::weakly_canonical(dir, error).string();  // "d" and "d/" share
  if (error) key = dir;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto alive = cache[key].lock()) return alive;

  auto data = std::make_shared<FashionMnist>();
  data->train = load_split(dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
  data->test = load_split(dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
  cache[key] = data;
  return data;
}

at::Tensor normalize_fashion_mnist(const at::Tensor& pixels) {
  if (pixels.scalar_type() != torch::kUInt8) {
    throw std::invalid_argument("normalize_fashion_mnist: expected uint8 pixels, got " +
                                std::string(c10::toString(pixels.scalar_type())));
  }
  // A 256-entry table in a plain loop: no ATen parallel region, whose thread wake-ups cost
  // milliseconds per batch when the cores are busy, and 4 bytes of output per byte read.
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[v] = (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
    return t;
  }();
  const at::Tensor src = pixels.contiguous();
  at::Tensor out = torch::empty(src.sizes(), torch::kFloat32);
  const uint8_t* in = src.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0, n = src.numel(); i < n; ++i) dst[i] = table[in[i]];
  return out;
}

}  // namespace ht
