// The data interface the trainer consumes: batches, a resumable cursor, validation and probe splits.
// Concrete data sets (Fashion-MNIST, text corpora, user data) implement DataSource elsewhere.
#pragma once

#include <ATen/core/Tensor.h>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ht {

struct Batch {
  at::Tensor input;   // e.g. [B, 1, 28, 28] float images or [B, T] int64 tokens
  at::Tensor target;  // e.g. [B] int64 labels or [B, T] int64 next tokens
};

// Where the training stream stands. Saved in checkpoints so resume draws the exact next batch.
struct DataCursor {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;  // batches already drawn in this epoch
  bool operator==(const DataCursor& o) const {
    return seed == o.seed && epoch == o.epoch && position == o.position;
  }
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch next_train_batch() = 0;  // advances the cursor
  virtual DataCursor cursor() const = 0;
  virtual void restore(const DataCursor& cursor) = 0;
  virtual int64_t num_val_batches() const = 0;
  virtual Batch val_batch(int64_t index) const = 0;  // deterministic, does not move the cursor
  // A probe split: data held out of training *and* of validation, for a strategy to judge its own
  // moves on (a nowcast jump that fits the training batches but not unseen data) without reading
  // the validation set its result is measured on. Optional: 0 batches = none.
  virtual int64_t num_probe_batches() const { return 0; }
  virtual Batch probe_batch(int64_t index) const {  // deterministic, does not move the cursor
    throw std::out_of_range("this data source holds no probe split (probe batch " + std::to_string(index) + ")");
  }
  // Items one training batch holds, for throughput: tokens for text, samples for images.
  virtual int64_t items_per_batch() const = 0;
  virtual const char* item_name() const { return "samples"; }
};

}  // namespace ht
