// A data source that serves one fixed batch of tokens every step, so that two sessions stepped
// on it (e.g. two optimizers, or two settings of one) compare weight for weight.
#pragma once

#include <torch/torch.h>

#include "hybrid/core/data.h"

namespace ht::testing {

class FixedTokens : public DataSource {
 public:
  FixedTokens() {
    torch::manual_seed(5);
    tokens_ = torch::randint(256, {4, 65});
  }
  Batch next_train_batch() override {
    ++cursor_.position;
    return {tokens_.narrow(1, 0, 64), tokens_.narrow(1, 1, 64)};
  }
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 0; }
  Batch val_batch(int64_t) const override { return {}; }
  int64_t items_per_batch() const override { return 4 * 64; }

 private:
  at::Tensor tokens_;
  DataCursor cursor_;
};

}  // namespace ht::testing
