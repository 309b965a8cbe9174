// Fashion-MNIST (28x28 grey clothing images, 10 classes) from Debian's dataset-fashion-mnist.
// Pixels stay uint8 in memory, loaded once per process and shared; batches are normalised floats.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/data.h"

namespace ht {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr float kFashionMnistMean = 0.2860f;  // of pixel/255 over the training set
inline constexpr float kFashionMnistStd = 0.3530f;

struct LabeledImages {
  at::Tensor images;  // [N, 1, 28, 28] uint8
  at::Tensor labels;  // [N] int64, 0..9
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

struct FashionMnist {
  LabeledImages train;  // 60000 images
  LabeledImages test;   // 10000 images (t10k)
};

// Reads the four gzipped IDX files in dir. While a result is alive, later calls for the same dir
// share it (~55 MB) instead of decompressing again. Throws naming the missing path and the package.
std::shared_ptr<const FashionMnist> load_fashion_mnist(const std::string& dir = kFashionMnistDir);

// uint8 pixels -> float (x / 255 - mean) / std, same shape.
at::Tensor normalize_fashion_mnist(const at::Tensor& pixels);

struct FashionMnistSplit {
  int64_t val_holdout = 0;      // > 0: validate on the last val_holdout training images and train on
                                // the rest; 0: train on all 60000 and validate on the t10k test set
  int64_t max_val_batches = 0;  // cap on num_val_batches(); 0 = the whole validation set
  int64_t probe_holdout = 0;    // > 0: the probe split, this many training images just before the
                                // validation holdout (or the file's end), never trained on
};

// Training: a seeded permutation per epoch, batches of exactly batch_size (the last partial batch
// is dropped). Validation and probe: their images in file order; the last batch may be smaller.
// Batch: input [B, 1, 28, 28] float normalised, target [B] int64.
// Cursor: position == batches_per_epoch() means epoch done; the next batch opens epoch + 1.
// restore() adopts the cursor's seed, so the resumed stream is the saved run's, whatever seed the
// source was built with.
class FashionMnistSource : public DataSource {
 public:
  FashionMnistSource(const std::string& dir, int64_t batch_size, uint64_t seed,
                     FashionMnistSplit split = {});
  FashionMnistSource(std::shared_ptr<const FashionMnist> data, int64_t batch_size, uint64_t seed,
                     FashionMnistSplit split = {});

  Batch next_train_batch() override;
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& cursor) override;
  int64_t num_val_batches() const override;
  Batch val_batch(int64_t index) const override;
  int64_t num_probe_batches() const override { return (probe_count_ + batch_size_ - 1) / batch_size_; }
  Batch probe_batch(int64_t index) const override;
  int64_t items_per_batch() const override { return batch_size_; }
  const char* item_name() const override { return "samples"; }

  int64_t num_train() const { return num_train_; }
  int64_t num_val() const { return val_count_; }
  int64_t num_probe() const { return probe_count_; }
  int64_t batches_per_epoch() const { return num_train_ / batch_size_; }

 private:
  const std::vector<int64_t>& order();  // this epoch's permutation of training indices
  Batch rows(const LabeledImages& set, int64_t begin, int64_t count) const;

  std::shared_ptr<const FashionMnist> data_;
  int64_t batch_size_;
  FashionMnistSplit split_;
  int64_t num_train_ = 0;                // training uses data_->train[0, num_train_)
  int64_t probe_count_ = 0;              // probes use data_->train[num_train_, +probe_count_)
  const LabeledImages* val_set_ = nullptr;
  int64_t val_begin_ = 0, val_count_ = 0;  // validation uses (*val_set_)[val_begin_, +val_count_)
  DataCursor cursor_;
  std::vector<int64_t> order_;
  DataCursor order_for_{0, -1, 0};  // seed and epoch order_ was drawn for
};

}  // namespace ht
