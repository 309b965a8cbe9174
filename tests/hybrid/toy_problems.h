// Toy problems for the hybrid engine's tests, independent of the data and models libraries:
// a quadratic bowl (known geometric SGD trajectory) and a noisy MLP regression (Adam, minibatches).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hybrid/core/trainer.h"
#include "hybrid/hybrid/predictor.h"
#include "support/reference_optimizers.h"

namespace toy {

// Every training batch is the same placeholder: the bowl's loss ignores it (unless its minimum
// comes from the batch), so rejected or consumed batches cannot change the trajectory.
class ConstantData : public ht::DataSource {
 public:
  ht::Batch next_train_batch() override {
    ++cursor_.position;
    return {torch::zeros({1, 1}), torch::zeros({1})};
  }
  ht::DataCursor cursor() const override { return cursor_; }
  void restore(const ht::DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 1; }
  ht::Batch val_batch(int64_t) const override { return {torch::zeros({1, 1}), torch::zeros({1})}; }
  // A probe split of probe_batches batches (none by default) whose target is -1, not 0.
  int64_t num_probe_batches() const override { return probe_batches; }
  ht::Batch probe_batch(int64_t) const override { return {torch::zeros({1, 1}), -torch::ones({1})}; }
  int64_t items_per_batch() const override { return 1; }
  int64_t probe_batches = 0;

 private:
  ht::DataCursor cursor_;
};

// 0.5 * sum_i lambda_i (w_i - 1)^2 with few distinct curvatures: under SGD with a constant lr the
// update of each coordinate shrinks by (1 - lr * lambda_i) per step, a sum of geometric modes.
struct Bowl : torch::nn::Module {
  explicit Bowl(int64_t n = 48) {
    w = register_parameter("w", torch::zeros({n}));
    lambda = register_buffer("lambda", torch::tensor({1.0f, 0.4f, 0.1f}).repeat({n / 3}));  // [n]
  }
  at::Tensor loss() { return 0.5 * (lambda * (w - 1.0).pow(2)).sum(); }
  at::Tensor w, lambda;
};

// y = teacher(x) + noise; 64 fixed training batches cycled in order, 4 validation batches.
class RegressionData : public ht::DataSource {
 public:
  explicit RegressionData(int64_t batch = 64, int64_t dim = 16, double noise = 0.1) {
    auto gen = at::detail::createCPUGenerator(7);
    auto w1 = torch::randn({dim, 32}, gen) / std::sqrt(double(dim));
    auto w2 = torch::randn({32, 1}, gen) / std::sqrt(32.0);
    auto make = [&](int64_t n) {
      auto x = torch::randn({n, dim}, gen);
      auto y = torch::tanh(x.mm(w1)).mm(w2) + noise * torch::randn({n, 1}, gen);
      return ht::Batch{x, y};
    };
    for (int i = 0; i < 64; ++i) train_.push_back(make(batch));
    for (int i = 0; i < 4; ++i) val_.push_back(make(256));
    batch_ = batch;
  }
  ht::Batch next_train_batch() override {
    const auto& b = train_[static_cast<size_t>(cursor_.position % 64)];
    ++cursor_.position;
    return b;
  }
  ht::DataCursor cursor() const override { return cursor_; }
  void restore(const ht::DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 4; }
  ht::Batch val_batch(int64_t i) const override { return val_[static_cast<size_t>(i)]; }
  int64_t items_per_batch() const override { return batch_; }

 private:
  std::vector<ht::Batch> train_, val_;
  int64_t batch_;
  ht::DataCursor cursor_;
};

struct Mlp : torch::nn::Module {
  explicit Mlp(int64_t dim = 16, int64_t hidden = 64) {
    fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, 1));
  }
  at::Tensor forward(const at::Tensor& x) {  // [B, dim] -> [B, 1]
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Collects the trainer's messages and step records; on_checkpoint_written, if set, sees each
// checkpoint as it is written.
struct RecordingLogger : ht::Logger {
  void on_step(const ht::StepRecord& r) override { steps.push_back(r); }
  void on_message(ht::Level, const std::string& m) override { messages.push_back(m); }
  void on_eval(const ht::EvalRecord& e) override { evals.push_back(e); }
  void on_checkpoint(const std::string& path, int64_t step) override {
    if (on_checkpoint_written) on_checkpoint_written(path, step);
  }
  std::function<void(const std::string&, int64_t)> on_checkpoint_written;
  std::vector<ht::StepRecord> steps;
  std::vector<ht::EvalRecord> evals;
  std::vector<std::string> messages;
};

// A model, its objective, optimizer, data and trainer, built the same way every time.
struct BowlRun {
  // minimum_from_batch: the bowl's minimum is at 1 + 2 x the batch's target, so 1 on training
  // batches and -1 on ConstantData's probe split (a jump towards 1 fits training data only).
  // schedule: Cosine decays the rate over the run to 0.1 of lr (no warmup).
  explicit BowlRun(int64_t max_steps, double lr = 0.1, bool minimum_from_batch = false,
                   ht::LrSchedule::Kind schedule = ht::LrSchedule::Kind::Constant) {
    bowl = std::make_shared<Bowl>();
    objective = ht::make_objective(bowl, [b = bowl.get(), minimum_from_batch](const ht::Batch& batch) {
      if (!minimum_from_batch) return b->loss();
      return 0.5 * (b->lambda * (b->w - (1.0 + 2.0 * batch.target.mean())).pow(2)).sum();
    });
    optimizer = std::make_unique<ht::testing::ReferenceSgd>(bowl->parameters(), lr);
    ht::TrainerOptions to;
    to.max_steps = max_steps;
    to.grad_clip = 0.0;
    to.schedule.kind = schedule;
    to.schedule.total_steps = max_steps;
    trainer = std::make_unique<ht::Trainer>(*objective, *optimizer, data, to, &logger);
  }
  double loss() {
    torch::NoGradGuard g;
    return bowl->loss().item<double>();
  }
  std::shared_ptr<Bowl> bowl;
  std::unique_ptr<ht::Objective> objective;
  std::unique_ptr<ht::Optimizer> optimizer;
  ConstantData data;
  RecordingLogger logger;
  std::unique_ptr<ht::Trainer> trainer;
};

struct MlpRun {
  explicit MlpRun(int64_t max_steps, double lr = 3e-3, uint64_t seed = 0, int64_t batch = 64,
                  double noise = 0.1)
      : data(batch, 16, noise) {
    torch::manual_seed(seed);
    mlp = std::make_shared<Mlp>();
    objective = ht::make_objective(mlp, [m = mlp.get()](const ht::Batch& b) {
      return torch::mse_loss(m->forward(b.input), b.target);
    });
    ht::testing::ReferenceAdamWOptions ao;
    ao.lr = lr;
    ao.weight_decay = 0.0;
    optimizer = ht::testing::reference_adamw(mlp->parameters(), ao);
    ht::TrainerOptions to;
    to.max_steps = max_steps;
    to.grad_clip = 1.0;
    to.schedule.kind = ht::LrSchedule::Kind::Constant;
    to.schedule.total_steps = max_steps;
    trainer = std::make_unique<ht::Trainer>(*objective, *optimizer, data, to, &logger);
  }
  // Rebuilds the trainer with changed options (before the first step; strategies are set after).
  void configure(const std::function<void(ht::TrainerOptions&)>& change) {
    ht::TrainerOptions to = trainer->options();
    change(to);
    trainer = std::make_unique<ht::Trainer>(*objective, *optimizer, data, to, &logger);
  }
  double val_loss() { return trainer->evaluate().val_loss; }
  std::shared_ptr<Mlp> mlp;
  std::unique_ptr<ht::Objective> objective;
  std::unique_ptr<ht::Optimizer> optimizer;
  RegressionData data;
  RecordingLogger logger;
  std::unique_ptr<ht::Trainer> trainer;
};

inline std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

inline bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Wraps a real predictor and turns its output into something harmful.
class SabotagedPredictor : public ht::UpdatePredictor {
 public:
  // Negate: the update backwards. Noise: N(0, noise^2). AlternatePhases: noise in alternate
  // stretches of 20 observations. Timid: the right direction, `noise` times too short.
  enum class Mode { Negate, Noise, AlternatePhases, Timid };
  SabotagedPredictor(Mode mode, double noise = 1.0,
                     std::unique_ptr<ht::UpdatePredictor> inner = ht::make_ema_predictor(0.9))
      : inner_(std::move(inner)), mode_(mode), noise_(noise) {}
  std::string name() const override { return "sabotaged"; }
  Input input() const override { return inner_->input(); }
  void observe_weights(const std::vector<at::Tensor>& w, const ht::TrainingFeatures& f) override {
    inner_->observe_weights(w, f);
    ++observed_;
  }
  void end_stretch(const std::vector<at::Tensor>& w) override { inner_->end_stretch(w); }
  void observe(const std::vector<at::Tensor>& d, const ht::TrainingFeatures& f) override {
    inner_->observe(d, f);
    ++observed_;
  }
  void reset_history() override { inner_->reset_history(); }

  bool ready() const override { return inner_->ready(); }
  void predict_into(std::vector<at::Tensor>& out, int64_t k, double scale) override {
    inner_->predict_into(out, k, scale);
    torch::NoGradGuard g;
    const bool bad = mode_ != Mode::AlternatePhases || (observed_ / 20) % 2 == 0;
    if (!bad) return;
    for (auto& t : out) {
      if (mode_ == Mode::Negate) {
        t.neg_();
      } else if (mode_ == Mode::Timid) {
        t.mul_(noise_);
      } else {
        t.normal_(0.0, noise_);
      }
    }
  }
  int64_t state_bytes() const override { return inner_->state_bytes(); }
  void save(torch::serialize::OutputArchive& a) const override { inner_->save(a); }
  void load(torch::serialize::InputArchive& a) override { inner_->load(a); }

 private:
  std::unique_ptr<ht::UpdatePredictor> inner_;
  Mode mode_;
  double noise_;
  int64_t observed_ = 0;  // AlternatePhases: bad for 20 observations, good for the next 20
};

}  // namespace toy
