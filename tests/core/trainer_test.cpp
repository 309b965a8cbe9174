// The trainer end to end on a toy regression: learning, exact resume, corrupt-checkpoint
// fallback, NaN detection, gradient accumulation, the out-of-memory ladder, the weight average.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/trainer.h"
#include "hybrid/core/weight_average.h"
#include "support/reference_optimizers.h"
#include "support/toy_problem.h"
#include "support/remove_tree.h"

namespace ht {
namespace fs = std::filesystem;
using testing::ToyData;
using testing::ToyNet;

namespace {

struct ToyRun {
  std::shared_ptr<ToyNet> net;
  std::unique_ptr<Objective> objective;
  std::unique_ptr<Optimizer> optimizer;
  ToyData data;
  std::unique_ptr<Trainer> trainer;

  // input_noise: the loss perturbs its inputs with the global RNG, so a run depends on that RNG.
  explicit ToyRun(TrainerOptions o, int64_t batch = 64, bool input_noise = false, double lr = 1e-2) : data(batch) {
    torch::manual_seed(42);
    net = std::make_shared<ToyNet>();
    if (input_noise) {
      auto n = net;
      objective = make_objective(n, [n](const Batch& b) {
        return torch::mse_loss(n->forward(b.input + 0.05 * torch::randn_like(b.input)), b.target);
      });
    } else {
      objective = testing::toy_objective(net);
    }
    testing::ReferenceAdamWOptions a;
    a.lr = lr;
    optimizer = testing::reference_adamw(net->parameters(), a);
    trainer = std::make_unique<Trainer>(*objective, *optimizer, data, std::move(o));
  }
};

TrainerOptions options(int64_t steps) {
  TrainerOptions o;
  o.max_steps = steps;
  o.schedule.kind = LrSchedule::Kind::Cosine;
  o.schedule.warmup_steps = 10;
  o.schedule.total_steps = steps;
  return o;
}

void expect_same_weights(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& kv : pa) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << kv.key();
}

std::string temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("ht-trainer-" + std::to_string(::getpid()) + "-" + name);
  ht::testing::remove_tree(d);
  return d.string();
}

}  // namespace

TEST(Trainer, LossDropsOnARealProblem) {
  ToyRun run(options(300));
  const double before = run.trainer->evaluate().val_loss;
  const double after = run.trainer->fit().val_loss;
  EXPECT_LT(after, 0.2 * before) << "before " << before << " after " << after;
  EXPECT_EQ(run.trainer->step(), 300);
}

TEST(Trainer, ResumeIsBitExact) {
  // The loss draws noise from the global RNG, so the resumed run matches only if the RNG does.
  const std::string dir = temp_dir("resume");
  ToyRun straight(options(60), 64, /*input_noise=*/true);
  straight.trainer->fit();

  auto half = options(60);
  half.max_steps = 30;
  half.checkpoint.dir = dir;
  ToyRun first(half, 64, true);
  first.trainer->fit();  // writes ckpt at step 30

  ToyRun second(options(60), 64, true);
  torch::manual_seed(999);  // resume must restore the RNG itself
  ASSERT_EQ(second.trainer->resume_latest(dir), checkpoint_path(dir, 30));
  EXPECT_EQ(second.trainer->step(), 30);
  second.trainer->fit();
  expect_same_weights(*straight.net, *second.net);
  ht::testing::remove_tree(dir);
}

TEST(Trainer, CorruptNewestCheckpointFallsBackToThePreviousGoodOne) {
  const std::string dir = temp_dir("corrupt");
  auto o = options(20);
  o.checkpoint.dir = dir;
  o.checkpoint.every_steps = 10;
  ToyRun run(o);
  run.trainer->fit();
  ASSERT_TRUE(fs::exists(checkpoint_path(dir, 20)));
  fs::resize_file(checkpoint_path(dir, 20), fs::file_size(checkpoint_path(dir, 20)) / 2);

  struct Capture : Logger {
    std::string warnings;
    void on_message(Level l, const std::string& m) override {
      if (l == Level::Warning) warnings += m;
    }
  } capture;
  ToyRun resumed(options(20));
  Trainer t(*resumed.objective, *resumed.optimizer, resumed.data, options(20), &capture);
  EXPECT_EQ(t.resume_latest(dir), checkpoint_path(dir, 10));
  EXPECT_EQ(t.step(), 10);
  EXPECT_NE(capture.warnings.find("truncated"), std::string::npos) << capture.warnings;
  ht::testing::remove_tree(dir);
}

TEST(Trainer, CheckpointOfAnotherModelIsRejectedByName) {
  const std::string dir = temp_dir("othermodel");
  auto o = options(2);
  o.checkpoint.dir = dir;
  ToyRun small(o);
  small.trainer->fit();

  torch::manual_seed(1);
  auto wide = std::make_shared<ToyNet>(64);
  auto obj = testing::toy_objective(wide);
  auto opt = testing::reference_adamw(wide->parameters());
  ToyData data;
  Trainer t(*obj, *opt, data, options(2));
  try {
    t.load_checkpoint(checkpoint_path(dir, 2));
    FAIL();
  } catch (const CheckpointMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("fc1.weight"), std::string::npos) << e.what();
  }
  // Resuming does not mistake it for a corrupt file and fall back: no older one would fit either.
  EXPECT_THROW(t.resume_latest(dir), CheckpointMismatch);
  ht::testing::remove_tree(dir);
}

namespace {

// AdamW that runs out of memory inside its first update, after touching nothing.
class FailingOptimizer : public Optimizer {
 public:
  explicit FailingOptimizer(std::unique_ptr<Optimizer> inner) : inner_(std::move(inner)) {}
  void step() override {
    ++steps;
    if (steps == 1) throw c10::OutOfMemoryError("out of memory inside the update (test)", {});
    inner_->step();
  }
  void zero_grad() override { inner_->zero_grad(); }
  double lr() const override { return inner_->lr(); }
  void schedule_lr(const std::function<double(double)>& rate_of) override { inner_->schedule_lr(rate_of); }
  const std::vector<at::Tensor>& parameters() const override { return inner_->parameters(); }
  void save(torch::serialize::OutputArchive& a) const override { inner_->save(a); }
  void load(torch::serialize::InputArchive& a) override { inner_->load(a); }
  int64_t state_bytes() const override { return inner_->state_bytes(); }
  std::string name() const override { return "failing"; }
  int steps = 0;

 private:
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace

TEST(Trainer, OutOfMemoryInsideTheUpdateIsNotRetried) {
  // A retry would apply an update twice where the optimizer had already written some tensors.
  ToyRun run(options(5));
  FailingOptimizer failing(testing::reference_adamw(run.net->parameters()));
  Trainer t(*run.objective, failing, run.data, options(5));
  try {
    t.fit();
    FAIL() << "expected a TrainingError";
  } catch (const OutOfMemoryExit& e) {
    FAIL() << "the ladder retried an update: " << e.what();
  } catch (const TrainingError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer update"), std::string::npos) << e.what();
  }
  EXPECT_EQ(failing.steps, 1);
  EXPECT_EQ(t.step(), 0);
}

TEST(Trainer, OutOfMemoryInEvaluationWritesAResumableCheckpoint) {
  const std::string dir = temp_dir("evaloom");
  auto o = options(10);
  o.checkpoint.dir = dir;
  o.eval_every = 4;
  ToyRun run(o);
  struct EvalFails : Objective {
    Objective& inner;
    explicit EvalFails(Objective& i) : inner(i) {}
    torch::nn::Module& module() override { return inner.module(); }
    at::Tensor loss(const Batch& b) override { return inner.loss(b); }
    EvalStats evaluate(const Batch&) override { throw c10::OutOfMemoryError("no room (test)", {}); }
  } failing(*run.objective);
  Trainer t(failing, *run.optimizer, run.data, o);
  try {
    t.fit();
    FAIL() << "expected OutOfMemoryExit";
  } catch (const OutOfMemoryExit& e) {
    EXPECT_EQ(e.checkpoint_path, checkpoint_path(dir, 4)) << e.what();
    EXPECT_NE(std::string(e.what()).find("evaluation"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(run.net->is_training()) << "evaluation left the model in eval mode";
  ToyRun resumed(options(10));
  EXPECT_EQ(resumed.trainer->resume_latest(dir), checkpoint_path(dir, 4));
  expect_same_weights(*run.net, *resumed.net);
  ht::testing::remove_tree(dir);
}

TEST(Trainer, NonFiniteLossStopsWithAClearError) {
  auto o = options(50);
  o.grad_clip = 0;
  ToyRun run(o, 64, false, /*lr=*/1e6);  // diverges within a few steps
  try {
    run.trainer->fit();
    FAIL() << "expected divergence to be reported";
  } catch (const TrainingError& e) {
    EXPECT_NE(std::string(e.what()).find("learning rate"), std::string::npos) << e.what();
  }
}

TEST(Trainer, MicroBatchSplitsGiveTheSameStep) {
  ToyRun whole(options(5));
  auto o = options(5);
  o.micro_splits = 4;
  ToyRun split(o);
  whole.trainer->fit();
  split.trainer->fit();
  for (const auto& kv : whole.net->named_parameters())
    EXPECT_TRUE(torch::allclose(kv.value(), split.net->named_parameters()[kv.key()], 1e-5, 1e-6)) << kv.key();
}

TEST(Trainer, TrainsThroughMemoryPressureAndMatchesAnUnconstrainedRun) {
  ToyRun free_run(options(20), 16384);
  free_run.trainer->fit();

  ToyRun tight(options(20), 16384);
  release_cached_blocks();
  // Room for the model and data but not for the activations of a whole 16384-row batch.
  const int64_t budget = allocator_stats().current_bytes + (3 << 20);
  set_memory_budget(budget);
  EvalRecord last;
  EXPECT_NO_THROW(last = tight.trainer->fit());
  set_memory_budget(0);
  EXPECT_GT(tight.trainer->options().micro_splits, 1);
  for (const auto& kv : free_run.net->named_parameters())
    EXPECT_TRUE(torch::allclose(kv.value(), tight.net->named_parameters()[kv.key()], 1e-4, 1e-5)) << kv.key();
}

TEST(Trainer, HopelessBudgetWritesAnEmergencyCheckpointThatResumes) {
  const std::string dir = temp_dir("emergency");
  auto o = options(10);
  o.checkpoint.dir = dir;
  o.memory.max_micro_splits = 2;
  ToyRun run(o, 4096);
  for (int i = 0; i < 3; ++i) run.trainer->train_step();
  release_cached_blocks();
  set_memory_budget(allocator_stats().current_bytes + (64 << 10));
  try {
    run.trainer->fit();
    set_memory_budget(0);
    FAIL() << "expected OutOfMemoryExit";
  } catch (const OutOfMemoryExit& e) {
    set_memory_budget(0);
    EXPECT_NE(std::string(e.what()).find("memory budget"), std::string::npos) << e.what();
    // Where resuming looks: rerunning the same command continues from the emergency state.
    ToyRun resumed(options(10), 4096);
    EXPECT_EQ(resumed.trainer->resume_latest(dir), e.checkpoint_path);
    EXPECT_EQ(resumed.trainer->step(), 3);
    expect_same_weights(*run.net, *resumed.net);
  }
  ht::testing::remove_tree(dir);
}

// ---- the weight average (TrainerOptions::average_decay) ------------------------------------

namespace {

TrainerOptions averaged(TrainerOptions o, double decay = 0.9) {
  o.average_decay = decay;
  return o;
}

}  // namespace

TEST(Trainer, WeightAverageScoresBelowTheWeightsOnNoisyTraining) {
  // Small batches at a constant, high learning rate: the weights jitter around the minimum and
  // their average sits closer to it. Averaging does not change the trajectory itself.
  auto noisy = options(600);
  noisy.schedule.kind = LrSchedule::Kind::Constant;
  ToyRun plain(noisy, 4, false, 5e-2);
  ToyRun with_average(averaged(noisy, 0.95), 4, false, 5e-2);
  plain.trainer->fit();
  const double average_loss = with_average.trainer->fit().val_loss;
  expect_same_weights(*plain.net, *with_average.net);
  const double weights_loss = plain.trainer->evaluate().val_loss;
  EXPECT_LT(average_loss, 0.8 * weights_loss) << "average " << average_loss << ", weights " << weights_loss;
}

TEST(Trainer, EvaluationScoresTheAverageAndLeavesTheWeightsBitExact) {
  ToyRun run(averaged(options(40)));
  for (int i = 0; i < 40; ++i) run.trainer->train_step();
  std::vector<at::Tensor> weights;
  for (const auto& p : run.net->parameters()) weights.push_back(p.detach().clone());
  const double scored = run.trainer->evaluate().val_loss;
  for (size_t i = 0; i < weights.size(); ++i) EXPECT_TRUE(torch::equal(run.net->parameters()[i], weights[i]));

  // The same loss from a model that holds the average as its weights.
  ToyRun other(options(40));
  {
    torch::NoGradGuard no_grad;
    const auto& average = run.trainer->weight_average()->tensors();
    for (size_t i = 0; i < average.size(); ++i) other.net->parameters()[i].copy_(average[i]);
  }
  EXPECT_EQ(other.trainer->evaluate().val_loss, scored);
  EXPECT_NE(other.trainer->evaluate().val_loss, ToyRun(options(40)).trainer->evaluate().val_loss);
  EXPECT_GT(run.trainer->memory_summary().average_bytes, 0);
}

TEST(Trainer, ResumeKeepsTheWeightAverageBitExact) {
  const std::string dir = temp_dir("average-resume");
  ToyRun straight(averaged(options(60)));
  straight.trainer->fit();

  auto half = averaged(options(60));
  half.max_steps = 30;
  half.checkpoint.dir = dir;
  ToyRun first(half);
  first.trainer->fit();

  ToyRun second(averaged(options(60)));
  ASSERT_EQ(second.trainer->resume_latest(dir), checkpoint_path(dir, 30));
  EXPECT_EQ(second.trainer->weight_average()->updates(), 30);
  second.trainer->fit();
  expect_same_weights(*straight.net, *second.net);
  const auto& a = straight.trainer->weight_average()->tensors();
  const auto& b = second.trainer->weight_average()->tensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
  EXPECT_TRUE(inspect_checkpoint(checkpoint_path(dir, 30)).has_average);
  ht::testing::remove_tree(dir);
}

// With lag correction the smooth average is saved too: a resumed run scores the same weights,
// and sampling from the checkpoint reads the corrected ones.
TEST(Trainer, ResumeKeepsTheLagCorrectedAverageAndSamplingReadsIt) {
  auto corrected = [](TrainerOptions o) {
    o = averaged(o);
    o.average_lag_correction = 1.0;
    return o;
  };
  const std::string dir = temp_dir("average-lag-resume");
  ToyRun straight(corrected(options(60)));
  const double straight_loss = straight.trainer->fit().val_loss;

  auto half = corrected(options(60));
  half.max_steps = 30;
  half.checkpoint.dir = dir;
  ToyRun first(half);
  first.trainer->fit();
  testing::ToyNet sampled;
  load_checkpoint_weights(checkpoint_path(dir, 30), sampled);
  const auto scored = first.trainer->weight_average()->scored();
  for (size_t i = 0; i < scored.size(); ++i) {
    EXPECT_TRUE(torch::equal(sampled.parameters()[i], scored[i])) << i;
    EXPECT_FALSE(torch::equal(scored[i], first.trainer->weight_average()->tensors()[i])) << i;
  }

  ToyRun second(corrected(options(60)));
  ASSERT_EQ(second.trainer->resume_latest(dir), checkpoint_path(dir, 30));
  EXPECT_EQ(second.trainer->fit().val_loss, straight_loss);
  const auto a = straight.trainer->weight_average()->scored();
  const auto b = second.trainer->weight_average()->scored();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;

  // An average saved without the correction: its smooth average starts over from the average,
  // so the first evaluation scores the average itself.
  const std::string plain_dir = temp_dir("average-lag-none");
  auto p = averaged(options(10));
  p.checkpoint.dir = plain_dir;
  ToyRun uncorrected_run(p);
  uncorrected_run.trainer->fit();
  ToyRun resumed(corrected(options(20)));
  ASSERT_EQ(resumed.trainer->resume_latest(plain_dir), checkpoint_path(plain_dir, 10));
  const auto from_plain = resumed.trainer->weight_average()->scored();
  for (size_t i = 0; i < from_plain.size(); ++i)
    EXPECT_TRUE(torch::equal(from_plain[i], uncorrected_run.trainer->weight_average()->tensors()[i])) << i;

  auto nothing_to_correct = options(10);
  nothing_to_correct.average_lag_correction = 0.5;  // without average_decay
  EXPECT_THROW(ToyRun{nothing_to_correct}, OptionsError);
  ht::testing::remove_tree(dir);
  ht::testing::remove_tree(plain_dir);
}

TEST(Trainer, CheckpointWeightsForSamplingComeFromTheAverage) {
  const std::string dir = temp_dir("average-weights");
  auto o = averaged(options(30));
  o.checkpoint.dir = dir;
  ToyRun run(o);
  run.trainer->fit();
  const std::string path = checkpoint_path(dir, 30);

  testing::ToyNet from_average, from_weights;
  load_checkpoint_weights(path, from_average);
  load_checkpoint_weights(path, from_weights, /*prefer_average=*/false);
  const auto& average = run.trainer->weight_average()->tensors();
  for (size_t i = 0; i < average.size(); ++i) {
    EXPECT_TRUE(torch::equal(from_average.parameters()[i], average[i])) << i;
    EXPECT_TRUE(torch::equal(from_weights.parameters()[i], run.net->parameters()[i])) << i;
    EXPECT_FALSE(torch::equal(from_average.parameters()[i], from_weights.parameters()[i])) << i;
  }

  // A run with averaging that resumes a checkpoint written without it starts the average over.
  const std::string plain_dir = temp_dir("average-none");
  auto p = options(10);
  p.checkpoint.dir = plain_dir;
  ToyRun plain(p);
  plain.trainer->fit();
  ToyRun resumed(averaged(options(20)));
  ASSERT_EQ(resumed.trainer->resume_latest(plain_dir), checkpoint_path(plain_dir, 10));
  EXPECT_EQ(resumed.trainer->weight_average()->updates(), 0);
  resumed.trainer->train_step();
  EXPECT_EQ(resumed.trainer->weight_average()->updates(), 1);
  ht::testing::remove_tree(dir);
  ht::testing::remove_tree(plain_dir);
}

}  // namespace ht
