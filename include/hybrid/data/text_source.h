// Language-modelling batches from a TokenCorpus: random non-overlapping windows for training,
// fixed windows from a held-out tail for validation. Batch: input [B, T] int64, target [B, T] int64.
#pragma once

#include <cstdint>
#include <vector>

#include "hybrid/core/data.h"
#include "hybrid/data/token_corpus.h"

namespace ht {

// The last val_fraction of the tokens is held out. Each epoch cuts the training span into
// windows of T+1 tokens starting at a random phase in [0, T], shuffles them, and serves B windows
// per batch (target = input shifted by one token); a trailing group of fewer than B is dropped.
// Phase and order depend only on (seed, epoch), so restoring a cursor (whose seed it adopts)
// replays the same batches; position == batches_in_epoch(epoch) means the epoch is done.
// Validation batch i holds windows i*B.. of the held-out span in order (the last may be smaller);
// max_val_batches > 0 caps num_val_batches(). probe_fraction > 0 holds out that share of the tokens
// just before the validation tail as the probe split (windows in order, like validation's).
class TextSource : public DataSource {
 public:
  TextSource(TokenCorpus corpus, int64_t batch_size, int64_t context, uint64_t seed,
             double val_fraction = 0.1, int64_t max_val_batches = 0, double probe_fraction = 0.0);

  Batch next_train_batch() override;
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& cursor) override;
  int64_t num_val_batches() const override;
  Batch val_batch(int64_t index) const override;
  int64_t num_probe_batches() const override { return (num_probe_windows_ + batch_size_ - 1) / batch_size_; }
  Batch probe_batch(int64_t index) const override;
  int64_t items_per_batch() const override { return batch_size_ * context_; }
  const char* item_name() const override { return "tokens"; }

  const TokenCorpus& corpus() const { return corpus_; }
  int64_t vocab_size() const { return corpus_.vocab_size(); }
  int64_t batch_size() const { return batch_size_; }
  int64_t context() const { return context_; }
  int64_t num_train_tokens() const { return train_end_; }  // tokens [0, train_end) train
  int64_t num_val_tokens() const { return corpus_.size() - val_begin_; }
  int64_t num_probe_tokens() const { return val_begin_ - train_end_; }
  int64_t batches_in_epoch(int64_t epoch) const;  // varies by at most one with the epoch's phase

 private:
  struct EpochPlan {
    int64_t phase = 0;                // first window starts here
    std::vector<int64_t> order;       // window indices in serving order
  };
  EpochPlan plan(int64_t epoch) const;
  const EpochPlan& current_plan();
  Batch gather(const std::vector<int64_t>& starts) const;
  Batch windows(int64_t span_begin, int64_t span_windows, int64_t index) const;

  TokenCorpus corpus_;
  int64_t batch_size_;
  int64_t context_;
  int64_t max_val_batches_;
  int64_t train_end_ = 0;   // tokens [0, train_end_) train, [train_end_, val_begin_) probe,
  int64_t val_begin_ = 0;   // [val_begin_, end) validate
  int64_t num_val_windows_ = 0;
  int64_t num_probe_windows_ = 0;
  DataCursor cursor_;
  EpochPlan plan_;
  DataCursor plan_for_{0, -1, 0};  // seed and epoch plan_ was drawn for
};

}  // namespace ht
