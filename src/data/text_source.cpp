// TextSource: seeded, resumable windows of T+1 tokens over the training span; fixed validation
// windows over the held-out tail. Epoch e's phase and order are a pure function of (seed, e).
#include "hybrid/data/text_source.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <utility>

#include "hybrid/data/epoch_order.h"

namespace ht {

TextSource::TextSource(TokenCorpus corpus, int64_t batch_size, int64_t context, uint64_t seed,
                       double val_fraction, int64_t max_val_batches, double probe_fraction)
    : corpus_(std::move(corpus)), batch_size_(batch_size), context_(context), max_val_batches_(max_val_batches) {
  if (batch_size_ <= 0 || context_ <= 0) {
    throw std::invalid_argument("TextSource: batch size and context must be positive, got B=" +
                                std::to_string(batch_size_) + ", T=" + std::to_string(context_));
  }
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw std::invalid_argument("TextSource: val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
  }
  if (!(probe_fraction >= 0.0 && val_fraction + probe_fraction < 1.0)) {
    throw std::invalid_argument("TextSource: probe_fraction must be >= 0 and leave tokens to train on (val_fraction " +
                                std::to_string(val_fraction) + " + probe_fraction " + std::to_string(probe_fraction) +
                                " < 1)");
  }
  if (max_val_batches_ < 0) throw std::invalid_argument("TextSource: max_val_batches must be >= 0 (0 = all)");

  const int64_t n = corpus_.size();
  const int64_t window = context_ + 1;
  if (n < window) {
    throw std::invalid_argument("TextSource: corpus " + corpus_.name() + " has " + std::to_string(n) +
                                " tokens, fewer than one window of context + 1 = " + std::to_string(window) +
                                " (T=" + std::to_string(context_) + "); use a smaller context or a larger corpus");
  }
  const auto held_out = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  val_begin_ = n - held_out;
  num_val_windows_ = held_out / window;
  const auto probe_held = static_cast<int64_t>(std::floor(static_cast<double>(n) * probe_fraction));
  train_end_ = val_begin_ - probe_held;
  num_probe_windows_ = probe_held / window;
  if (probe_fraction > 0.0 && num_probe_windows_ == 0) {
    throw std::invalid_argument("TextSource: the " + std::to_string(probe_held) + " probe tokens (probe_fraction " +
                                std::to_string(probe_fraction) + " of " + std::to_string(n) +
                                ") are fewer than one window of " + std::to_string(window) +
                                " tokens; raise probe_fraction or lower the context");
  }
  if (val_fraction > 0.0 && num_val_windows_ == 0) {
    throw std::invalid_argument("TextSource: the held-out " + std::to_string(held_out) + " tokens (val_fraction " +
                                std::to_string(val_fraction) + " of " + std::to_string(n) +
                                ") are fewer than one window of " + std::to_string(window) +
                                " tokens; raise val_fraction or lower the context");
  }
  // The worst phase (T) must still leave B whole windows, so no epoch is empty.
  const int64_t needed = batch_size_ * window + context_;
  if (train_end_ < needed) {
    throw std::invalid_argument("TextSource: the training span of corpus " + corpus_.name() + " has " +
                                std::to_string(train_end_) + " tokens; a batch of B=" + std::to_string(batch_size_) +
                                " windows of T+1=" + std::to_string(window) + " tokens needs at least " +
                                std::to_string(needed) + "; lower B or T");
  }
  cursor_.seed = seed;
}

TextSource::EpochPlan TextSource::plan(int64_t epoch) const {
  auto rng = data_detail::epoch_rng(cursor_.seed, epoch);
  EpochPlan p;
  p.phase = static_cast<int64_t>(data_detail::uniform_below(rng, static_cast<uint64_t>(context_ + 1)));
  p.order = data_detail::permutation((train_end_ - p.phase) / (context_ + 1), rng);
  return p;
}

const TextSource::EpochPlan& TextSource::current_plan() {
  if (plan_for_.seed != cursor_.seed || plan_for_.epoch != cursor_.epoch) {
    plan_ = plan(cursor_.epoch);
    plan_for_ = {cursor_.seed, cursor_.epoch, 0};
  }
  return plan_;
}

int64_t TextSource::batches_in_epoch(int64_t epoch) const {
  if (plan_for_.seed == cursor_.seed && plan_for_.epoch == epoch) {
    return static_cast<int64_t>(plan_.order.size()) / batch_size_;
  }
  return static_cast<int64_t>(plan(epoch).order.size()) / batch_size_;
}

Batch TextSource::gather(const std::vector<int64_t>& starts) const {
  const auto b = static_cast<int64_t>(starts.size());
  Batch batch;
  batch.input = torch::empty({b, context_}, torch::kInt64);   // [b, T]
  batch.target = torch::empty({b, context_}, torch::kInt64);  // [b, T]
  int64_t* in = batch.input.data_ptr<int64_t>();
  int64_t* out = batch.target.data_ptr<int64_t>();
  const uint16_t* tokens = corpus_.data();
  for (int64_t i = 0; i < b; ++i) {
    const uint16_t* w = tokens + starts[i];  // T+1 tokens
    for (int64_t t = 0; t < context_; ++t) {
      in[i * context_ + t] = w[t];
      out[i * context_ + t] = w[t + 1];
    }
  }
  return batch;
}

Batch TextSource::next_train_batch() {
  if (cursor_.position >= static_cast<int64_t>(current_plan().order.size()) / batch_size_) {
    ++cursor_.epoch;
    cursor_.position = 0;
  }
  const EpochPlan& p = current_plan();
  std::vector<int64_t> starts(static_cast<size_t>(batch_size_));
  for (int64_t i = 0; i < batch_size_; ++i) {
    starts[i] = p.phase + p.order[cursor_.position * batch_size_ + i] * (context_ + 1);
  }
  ++cursor_.position;
  return gather(starts);
}

void TextSource::restore(const DataCursor& cursor) {
  if (cursor.epoch < 0 || cursor.position < 0) {
    throw std::invalid_argument("TextSource: cursor epoch and position must be >= 0");
  }
  const DataCursor previous = cursor_;
  cursor_ = cursor;
  const int64_t batches = static_cast<int64_t>(current_plan().order.size()) / batch_size_;
  if (cursor.position > batches) {
    cursor_ = previous;
    throw std::invalid_argument("TextSource: cursor position " + std::to_string(cursor.position) + " exceeds the " +
                                std::to_string(batches) + " batches of epoch " + std::to_string(cursor.epoch) +
                                "; was it saved with another corpus, batch size or context?");
  }
}

int64_t TextSource::num_val_batches() const {
  const int64_t all = (num_val_windows_ + batch_size_ - 1) / batch_size_;
  return max_val_batches_ > 0 ? std::min(all, max_val_batches_) : all;
}

Batch TextSource::val_batch(int64_t index) const {
  if (index < 0 || index >= num_val_batches()) {
    throw std::out_of_range("TextSource: validation batch " + std::to_string(index) + " out of range [0, " +
                            std::to_string(num_val_batches()) + ")");
  }
  return windows(val_begin_, num_val_windows_, index);
}

Batch TextSource::probe_batch(int64_t index) const {
  if (index < 0 || index >= num_probe_batches()) {
    throw std::out_of_range("TextSource: probe batch " + std::to_string(index) + " out of range [0, " +
                            std::to_string(num_probe_batches()) + ")" +
                            (num_probe_windows_ == 0 ? ": no probe split (probe_fraction = 0)" : ""));
  }
  return windows(train_end_, num_probe_windows_, index);
}

// Batch index of a held-out span cut into windows of T+1 tokens in order (the last may be smaller).
Batch TextSource::windows(int64_t span_begin, int64_t span_windows, int64_t index) const {
  const int64_t first = index * batch_size_;
  const int64_t count = std::min(batch_size_, span_windows - first);
  std::vector<int64_t> starts(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) starts[i] = span_begin + (first + i) * (context_ + 1);
  return gather(starts);
}

}  // namespace ht
