// Evaluation: the validation loss (and accuracy, and user metrics) of the weights evaluations
// score - the weight average when there is one - without touching what training does next.
#include <chrono>

#include <torch/torch.h>

#include "core/cpu_random_state.h"
#include "hybrid/core/trainer.h"
#include "hybrid/core/weight_average.h"

namespace ht {
namespace {

void accumulate(EvalStats& into, const EvalStats& s) {
  into.loss_sum += s.loss_sum;
  into.correct += s.correct;
  into.count += s.count;
  into.has_accuracy = s.has_accuracy;
}

}  // namespace

EvalRecord Trainer::evaluate() {
  // Evaluating must not change what training does next: an objective that draws random numbers
  // while it scores (noise, sampling) would otherwise shift every later draw, and a run that
  // evaluated at step N would differ from one resumed there.
  struct KeepRng {
    at::Tensor state = cpu_random_state();
    ~KeepRng() { set_cpu_random_state(state); }
  } keep_rng;
  EvalRecord r;
  with_evaluated_weights([&] { r = evaluate_weights(); });
  return r;
}

void Trainer::with_evaluated_weights(const std::function<void()>& fn) {
  if (!average_ || average_->updates() == 0) return fn();
  // The average in the weights' place; swapping back is exact, also after an error.
  struct Swapped {
    WeightAverage& average;
    explicit Swapped(WeightAverage& a) : average(a) { average.swap(); }
    ~Swapped() { average.swap(); }
  } swapped(*average_);
  fn();
}

EvalRecord Trainer::evaluate_weights() {
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  auto& module = objective_.module();
  EvalModeGuard eval_mode(module);  // back to training mode however evaluation ends
  EvalStats total;
  std::vector<double> metric_sums(metrics_.size(), 0.0);
  int64_t metric_rows = 0;
  int64_t n = data_.num_val_batches();
  if (options_.eval_batches >= 0) n = std::min(n, options_.eval_batches);
  // Data-parallel: rank r scores batches r, r + N, ... and the sums are added up below.
  Collective& ranks = collective();
  bool out_of_memory = false;
  try {
  for (int64_t i = ranks.rank(); i < n; i += ranks.world_size()) {
    Batch batch = data_.val_batch(i);
    if (batch.input.device() != options_.device) batch = Batch{batch.input.to(options_.device), batch.target.to(options_.device)};
    // Under memory pressure evaluation splits its batches too (sums are split-invariant).
    for (int64_t splits = options_.micro_splits;; splits *= 2) {
      try {
        const int64_t chunks = std::min<int64_t>(splits, batch.input.size(0));
        const auto inputs = batch.input.tensor_split(chunks);
        const auto targets = batch.target.tensor_split(chunks);
        EvalStats part;
        std::vector<double> metric_part(metrics_.size(), 0.0);
        for (int64_t c = 0; c < chunks; ++c) {
          const Batch chunk{inputs[c], targets[c]};
          accumulate(part, objective_.evaluate(chunk));
          const auto rows = static_cast<double>(chunk.input.size(0));
          for (size_t m = 0; m < metrics_.size(); ++m) metric_part[m] += rows * metrics_[m].second(chunk);
        }
        accumulate(total, part);
        for (size_t m = 0; m < metrics_.size(); ++m) metric_sums[m] += metric_part[m];
        metric_rows += batch.input.size(0);
        break;
      } catch (const c10::OutOfMemoryError&) {
        memory_.release_cached();
        if (!options_.memory.enabled || splits >= batch.input.size(0)) throw;
      }
    }
  }
  } catch (const c10::OutOfMemoryError&) {
    if (ranks.world_size() == 1) throw;
    out_of_memory = true;  // the others must hear it, or they would wait for this rank's sums
  }
  if (ranks.world_size() > 1) {
    std::vector<double> sums = {total.loss_sum, total.correct, static_cast<double>(total.count),
                                static_cast<double>(metric_rows), out_of_memory ? 1.0 : 0.0,
                                total.has_accuracy ? 1.0 : 0.0};
    sums.insert(sums.end(), metric_sums.begin(), metric_sums.end());
    std::vector<at::Tensor> t{torch::tensor(sums, torch::kFloat64)};
    ranks.allreduce_sum(t);
    const auto v = t[0];
    if (v[4].item<double>() > 0)
      throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                  "a rank ran out of memory in evaluation with batches split to single rows");
    total.loss_sum = v[0].item<double>();
    total.correct = v[1].item<double>();
    total.count = static_cast<int64_t>(v[2].item<double>());
    metric_rows = static_cast<int64_t>(v[3].item<double>());
    total.has_accuracy = v[5].item<double>() > 0;  // a rank with no batch to score has no say
    for (size_t m = 0; m < metric_sums.size(); ++m) metric_sums[m] = v[6 + static_cast<int64_t>(m)].item<double>();
  }
  EvalRecord rec;
  rec.step = step_;
  rec.items = total.count;
  if (total.count > 0) {
    rec.val_loss = total.loss_sum / static_cast<double>(total.count);
    if (total.has_accuracy) rec.accuracy = total.correct / static_cast<double>(total.count);
  }
  for (size_t m = 0; m < metrics_.size() && metric_rows > 0; ++m)
    rec.metrics[metrics_[m].first] = metric_sums[m] / static_cast<double>(metric_rows);
  rec.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return rec;
}

EvalRecord Trainer::evaluate_or_exit() {
  try {
    return evaluate();
  } catch (const c10::OutOfMemoryError& e) {
    if (!options_.memory.enabled) throw;
    // Evaluation already split its batches down to single rows: nothing is left to try.
    exit_out_of_memory("evaluation at step " + std::to_string(step_) + ": out of memory with " +
                       "batches split to single rows (" + e.what_without_backtrace() + ")");
  }
}

void Trainer::record_evaluation(const EvalRecord& record) {
  evaluations_.push_back(record);
  logger_->on_eval(record);
  for (auto& c : callbacks_) c->on_eval(*this, record);
}

}  // namespace ht
