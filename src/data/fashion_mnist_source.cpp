// FashionMnistSource: seeded, resumable training batches; in-order validation and probe splits.
// The order of epoch e is a pure function of (seed, e), so a cursor is all a checkpoint needs.
#include "hybrid/data/fashion_mnist.h"

#include <torch/torch.h>

#include <cstring>
#include <stdexcept>
#include <utility>

#include "hybrid/data/epoch_order.h"

namespace ht {
namespace {

// In-memory data may come from users; the batch code copies raw rows, so the layout must be exact.
void check_layout(const LabeledImages& set, const char* which) {
  const bool ok = set.images.defined() && set.labels.defined() && set.images.scalar_type() == torch::kUInt8 &&
                  set.images.dim() == 4 && set.images.size(1) == 1 && set.images.size(2) == 28 &&
                  set.images.size(3) == 28 && set.images.is_contiguous() &&
                  set.labels.scalar_type() == torch::kInt64 && set.labels.dim() == 1 &&
                  set.labels.size(0) == set.images.size(0) && set.labels.is_contiguous();
  if (!ok) {
    throw std::invalid_argument(std::string("FashionMnistSource: ") + which +
                                " set must be contiguous uint8 images [N, 1, 28, 28] with int64 labels [N]");
  }
}

}  // namespace

FashionMnistSource::FashionMnistSource(const std::string& dir, int64_t batch_size, uint64_t seed,
                                       FashionMnistSplit split)
    : FashionMnistSource(load_fashion_mnist(dir), batch_size, seed, split) {}

FashionMnistSource::FashionMnistSource(std::shared_ptr<const FashionMnist> data, int64_t batch_size,
                                       uint64_t seed, FashionMnistSplit split)
    : data_(std::move(data)), batch_size_(batch_size), split_(split) {
  if (!data_) throw std::invalid_argument("FashionMnistSource: no data");
  if (batch_size_ <= 0) {
    throw std::invalid_argument("FashionMnistSource: batch size must be positive, got " +
                                std::to_string(batch_size_));
  }
  check_layout(data_->train, "training");
  const int64_t n = data_->train.size();
  if (split_.val_holdout < 0 || split_.val_holdout >= n) {
    throw std::invalid_argument("FashionMnistSource: val_holdout must be in [0, " + std::to_string(n) +
                                "), got " + std::to_string(split_.val_holdout));
  }
  if (split_.probe_holdout < 0 || split_.probe_holdout >= n - split_.val_holdout) {
    throw std::invalid_argument("FashionMnistSource: probe_holdout must be in [0, " +
                                std::to_string(n - split_.val_holdout) + "), got " +
                                std::to_string(split_.probe_holdout));
  }
  if (split_.max_val_batches < 0) {
    throw std::invalid_argument("FashionMnistSource: max_val_batches must be >= 0 (0 = all)");
  }
  if (split_.val_holdout > 0) {
    num_train_ = n - split_.val_holdout;
    val_set_ = &data_->train;
    val_begin_ = num_train_;
    val_count_ = split_.val_holdout;
  } else {
    num_train_ = n;
    check_layout(data_->test, "test");
    val_set_ = &data_->test;
    val_count_ = data_->test.size();
  }
  probe_count_ = split_.probe_holdout;
  num_train_ -= probe_count_;
  if (num_train_ < batch_size_) {
    throw std::invalid_argument("FashionMnistSource: " + std::to_string(num_train_) +
                                " training images cannot fill one batch of " + std::to_string(batch_size_));
  }
  cursor_.seed = seed;
}

const std::vector<int64_t>& FashionMnistSource::order() {
  if (order_for_.seed != cursor_.seed || order_for_.epoch != cursor_.epoch) {
    auto rng = data_detail::epoch_rng(cursor_.seed, cursor_.epoch);
    order_ = data_detail::permutation(num_train_, rng);
    order_for_ = {cursor_.seed, cursor_.epoch, 0};
  }
  return order_;
}

Batch FashionMnistSource::next_train_batch() {
  if (cursor_.position >= batches_per_epoch()) {
    ++cursor_.epoch;
    cursor_.position = 0;
  }
  const int64_t* index = order().data() + cursor_.position * batch_size_;  // [B]
  const LabeledImages& train = data_->train;
  const int64_t pixels = train.images[0].numel();  // 784
  // Plain copies rather than index_select: no ATen parallel region per batch (see normalize).
  at::Tensor images = torch::empty({batch_size_, 1, 28, 28}, torch::kUInt8);  // [B, 1, 28, 28]
  at::Tensor labels = torch::empty({batch_size_}, torch::kInt64);             // [B]
  const uint8_t* all_images = train.images.data_ptr<uint8_t>();
  const int64_t* all_labels = train.labels.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_size_; ++b) {
    std::memcpy(images.data_ptr<uint8_t>() + b * pixels, all_images + index[b] * pixels, pixels);
    labels.data_ptr<int64_t>()[b] = all_labels[index[b]];
  }
  ++cursor_.position;
  return {normalize_fashion_mnist(images), labels};
}

void FashionMnistSource::restore(const DataCursor& cursor) {
  if (cursor.epoch < 0 || cursor.position < 0 || cursor.position > batches_per_epoch()) {
    throw std::invalid_argument(
        "FashionMnistSource: cursor {epoch " + std::to_string(cursor.epoch) + ", position " +
        std::to_string(cursor.position) + "} does not fit " + std::to_string(batches_per_epoch()) +
        " batches per epoch; was it saved with another batch size or split?");
  }
  cursor_ = cursor;
}

int64_t FashionMnistSource::num_val_batches() const {
  const int64_t all = (val_count_ + batch_size_ - 1) / batch_size_;
  return split_.max_val_batches > 0 ? std::min(all, split_.max_val_batches) : all;
}

Batch FashionMnistSource::val_batch(int64_t index) const {
  if (index < 0 || index >= num_val_batches()) {
    throw std::out_of_range("FashionMnistSource: validation batch " + std::to_string(index) +
                            " out of range [0, " + std::to_string(num_val_batches()) + ")");
  }
  const int64_t begin = val_begin_ + index * batch_size_;
  return rows(*val_set_, begin, std::min(batch_size_, val_begin_ + val_count_ - begin));
}

Batch FashionMnistSource::probe_batch(int64_t index) const {
  if (index < 0 || index >= num_probe_batches()) {
    throw std::out_of_range("FashionMnistSource: probe batch " + std::to_string(index) + " out of range [0, " +
                            std::to_string(num_probe_batches()) + ")" +
                            (probe_count_ == 0 ? ": no probe split (FashionMnistSplit::probe_holdout = 0)" : ""));
  }
  const int64_t begin = num_train_ + index * batch_size_;
  return rows(data_->train, begin, std::min(batch_size_, num_train_ + probe_count_ - begin));
}

Batch FashionMnistSource::rows(const LabeledImages& set, int64_t begin, int64_t count) const {
  Batch batch;
  batch.input = normalize_fashion_mnist(set.images.narrow(0, begin, count));  // [b, 1, 28, 28]
  batch.target = set.labels.narrow(0, begin, count).clone();  // [b]; a copy, the cache stays intact
  return batch;
}

}  // namespace ht
