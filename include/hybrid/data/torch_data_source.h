// Any map-style torch::data dataset as a resumable ht::DataSource: batches in a seeded order per
// epoch, a cursor the trainer saves in checkpoints, so a resumed run draws the exact next batch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include "hybrid/core/data.h"
#include "hybrid/data/epoch_order.h"

namespace ht {

// Dataset: anything with `Example<> get(size_t)` and `optional<size_t> size()` (every
// torch::data::datasets::Dataset, e.g. torch::data::datasets::MNIST or one's own). Examples are
// stacked into batches: data [B, ...], target [B, ...]. Each training epoch visits every example
// once in epoch_order(seed, epoch) and drops its last partial batch; validation batches are the
// validation set in order, the last one partial.
template <typename Dataset>
class TorchDataSource final : public DataSource {
 public:
  TorchDataSource(Dataset train, Dataset validation, int64_t batch_size, uint64_t seed = 0)
      : train_(std::move(train)), val_(std::move(validation)), batch_(batch_size) {
    if (batch_ < 1) throw std::invalid_argument("TorchDataSource: batch_size must be >= 1");
    train_n_ = size_of(train_, "training");
    val_n_ = size_of(val_, "validation");
    if (train_n_ < batch_)
      throw std::invalid_argument("TorchDataSource: the training set has " + std::to_string(train_n_) +
                                  " examples, fewer than one batch of " + std::to_string(batch_));
    cursor_.seed = seed;
  }

  Batch next_train_batch() override {
    if (order_epoch_ != cursor_.epoch || order_.empty()) {
      order_ = epoch_order(cursor_.seed, cursor_.epoch, train_n_);
      order_epoch_ = cursor_.epoch;
    }
    std::vector<int64_t> rows(order_.begin() + cursor_.position * batch_,
                              order_.begin() + (cursor_.position + 1) * batch_);
    if (++cursor_.position == train_n_ / batch_) {  // the last partial batch is dropped
      cursor_.position = 0;
      ++cursor_.epoch;
    }
    return stack(train_, rows);
  }
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& cursor) override {
    if (cursor.position < 0 || cursor.position >= train_n_ / batch_)
      throw std::invalid_argument("TorchDataSource: cursor position " + std::to_string(cursor.position) +
                                  " is beyond an epoch of " + std::to_string(train_n_ / batch_) +
                                  " batches (another batch size or data set?)");
    cursor_ = cursor;
  }
  int64_t num_val_batches() const override { return (val_n_ + batch_ - 1) / batch_; }
  Batch val_batch(int64_t index) const override {
    std::vector<int64_t> rows;
    for (int64_t i = index * batch_; i < std::min(val_n_, (index + 1) * batch_); ++i) rows.push_back(i);
    return stack(val_, rows);
  }
  int64_t items_per_batch() const override { return batch_; }

 private:
  static int64_t size_of(const Dataset& d, const char* which) {
    const auto n = d.size();
    if (!n.has_value() || *n == 0)
      throw std::invalid_argument(std::string("TorchDataSource: the ") + which + " set has no known size");
    return static_cast<int64_t>(*n);
  }
  static Batch stack(const Dataset& d, const std::vector<int64_t>& rows) {
    std::vector<at::Tensor> data, target;
    for (int64_t i : rows) {
      auto example = const_cast<Dataset&>(d).get(static_cast<size_t>(i));  // get() is not const in torch::data
      data.push_back(example.data);
      target.push_back(example.target);
    }
    return Batch{torch::stack(data), torch::stack(target)};
  }

  Dataset train_, val_;
  int64_t batch_;
  int64_t train_n_ = 0, val_n_ = 0;
  DataCursor cursor_;
  std::vector<int64_t> order_;  // the current epoch's order
  int64_t order_epoch_ = -1;
};

}  // namespace ht
