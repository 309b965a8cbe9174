// The library API's traps, each hit once by a new user: who owns the learning rate, the schedule's
// length, the memory budget, module holders, foreign optimizers, checkpoints of another kind,
// missing directories, bad losses; and the seams that can act: callbacks, metrics, history, seed.
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/trainer.h"
#include "support/reference_optimizers.h"
#include "support/scratch_dir.h"
#include "support/toy_problem.h"
#include "support/toy_run.h"

namespace ht {
namespace {

using testing::ToyData;
using testing::ToyNet;

using ToyRun = testing::ToyAdamWRun;

TrainerOptions steps(int64_t n) {
  TrainerOptions o;
  o.max_steps = n;
  return o;
}

}  // namespace

// ---- learning rates: one owner ---------------------------------------------------------------

TEST(TrainerApi, TheOptimizersLearningRateIsNotOverwrittenByAScheduleDefault) {
  ToyRun run(/*lr=*/0.05);
  auto trainer = run.trainer(steps(3));
  trainer->train_step();
  EXPECT_DOUBLE_EQ(run.optimizer->lr(), 0.05);  // default schedule: constant, the optimizer's rate
}

TEST(TrainerApi, ParameterGroupsKeepTheirOwnRatesUnderTheSchedule) {
  torch::manual_seed(1);
  auto net = std::make_shared<ToyNet>();
  auto objective = testing::toy_objective(net);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(net->fc1->parameters(), std::make_unique<torch::optim::SGDOptions>(0.1));
  groups.emplace_back(net->fc2->parameters(), std::make_unique<torch::optim::SGDOptions>(0.01));
  auto sgd = std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.5));
  auto optimizer = wrap_torch_optimizer(sgd, "sgd");
  ToyData data;
  TrainerOptions o = steps(10);
  o.schedule.warmup_steps = 4;
  Trainer trainer(*objective, *optimizer, data, o);
  trainer.train_step();  // step 0 of a 4-step warmup: a quarter of each group's rate
  EXPECT_DOUBLE_EQ(sgd->param_groups()[0].options().get_lr(), 0.025);
  EXPECT_DOUBLE_EQ(sgd->param_groups()[1].options().get_lr(), 0.0025);
}

TEST(TrainerApi, TheSchedulesLengthDefaultsToTheRunsLength) {
  ToyRun run(/*lr=*/1.0);
  TrainerOptions o = steps(50);
  o.schedule.kind = LrSchedule::Kind::Cosine;
  o.schedule.min_lr_ratio = 0.1;
  auto trainer = run.trainer(o);
  EXPECT_EQ(trainer->options().schedule.total_steps, 50);
  for (int i = 0; i < 50; ++i) trainer->train_step();
  // The last step's rate is at the cosine's floor, not 1000 steps' worth of decay away from it.
  EXPECT_NEAR(run.optimizer->lr(), 0.1, 1e-3);
}

// ---- memory budget: one setting, enforced ----------------------------------------------------

TEST(TrainerApi, TheBudgetInTheOptionsIsTheOneTheAllocatorEnforces) {
  ASSERT_TRUE(tracking_allocator_installed());
  ToyRun run;
  TrainerOptions o = steps(5);
  o.memory.budget_bytes = allocator_stats().current_bytes + (64 << 20);
  {
    auto trainer = run.trainer(o);
    EXPECT_EQ(allocator_stats().budget_bytes, o.memory.budget_bytes);
    EXPECT_EQ(trainer->memory_budget(), o.memory.budget_bytes);
    EXPECT_THROW(torch::empty({128 << 20}, torch::kFloat), c10::OutOfMemoryError);  // 512 MiB
  }
  EXPECT_EQ(allocator_stats().budget_bytes, 0) << "the trainer puts the process's budget back";
}

// ---- what plugs in ---------------------------------------------------------------------------

TEST(TrainerApi, MakeObjectiveTakesTorchModuleHolders) {
  torch::manual_seed(3);
  torch::nn::Linear linear(2, 1);  // a TORCH_MODULE holder, not a shared_ptr
  auto objective = make_objective(linear, [linear](const Batch& b) mutable {
    return torch::mse_loss(linear(b.input), b.target);
  });
  EXPECT_EQ(&objective->module(), linear.ptr().get());
  auto optimizer = testing::reference_adamw(linear->parameters());
  ToyData data;
  Trainer trainer(*objective, *optimizer, data, steps(30));
  const double before = trainer.evaluate().val_loss;
  trainer.fit();
  EXPECT_LT(trainer.evaluate().val_loss, before);
}

TEST(TrainerApi, EvalModeLossScoresWithoutDropoutAndRestoresTheTrainingFlag) {
  // What the engines' verifications compare: the loss in eval mode (dropout off, so the same
  // weights give the same loss twice), no graph, and the module back in training mode afterwards -
  // also when the loss throws.
  torch::manual_seed(5);
  torch::nn::Sequential net(torch::nn::Linear(4, 16), torch::nn::Dropout(0.5), torch::nn::Linear(16, 1));
  bool fail = false;
  auto objective = make_objective(net, [net, &fail](const Batch& b) mutable {
    if (fail) throw std::runtime_error("out of memory (simulated)");
    return torch::mse_loss(net->forward(b.input), b.target);
  });
  const Batch batch{torch::randn({32, 4}), torch::randn({32, 1})};
  net->train();
  const double first = eval_mode_loss(*objective, batch);
  EXPECT_TRUE(net->is_training());
  EXPECT_EQ(eval_mode_loss(*objective, batch), first);
  // In training mode dropout draws another mask each time.
  EXPECT_NE(objective->loss(batch).item<double>(), objective->loss(batch).item<double>());
  fail = true;
  EXPECT_THROW(eval_mode_loss(*objective, batch), std::runtime_error);
  EXPECT_TRUE(net->is_training());
  net->eval();  // an evaluating caller stays in eval mode
  fail = false;
  EXPECT_EQ(eval_mode_loss(*objective, batch), first);
  EXPECT_FALSE(net->is_training());
}

TEST(TrainerApi, AnOptimizerOverAnotherModulesParametersIsRefused) {
  ToyRun run;
  auto other = std::make_shared<ToyNet>();
  auto foreign = testing::reference_adamw(other->parameters());
  try {
    Trainer trainer(*run.objective, *foreign, run.data, steps(3));
    FAIL() << "an optimizer of another module was accepted";
  } catch (const OptionsError& e) {
    EXPECT_NE(std::string(e.what()).find("not the objective's module's"), std::string::npos) << e.what();
  }
}

TEST(TrainerApi, ParametersOnAnotherDeviceThanTheRunsAreRefused) {
  ToyRun run;
  TrainerOptions o = steps(3);
  o.device = c10::Device("cuda:0");
  EXPECT_THROW(run.trainer(o), OptionsError);
}

// ---- checkpoints -----------------------------------------------------------------------------

namespace {

// The smallest step strategy: plain full steps, and a counter it saves.
class CountingStrategy : public StepStrategy {
 public:
  std::string name() const override { return "counting"; }
  StepRecord run_step(Trainer& trainer) override {
    const FullStepResult r = trainer.full_step();
    trainer.advance_step();
    ++count;
    StepRecord rec;
    rec.step = trainer.step();
    rec.loss = r.loss;
    return rec;
  }
  void save(torch::serialize::OutputArchive& a) const override { a.write("count", torch::tensor(count)); }
  void load(torch::serialize::InputArchive& a) override {
    at::Tensor t;
    a.read("count", t);
    count = t.item<int64_t>();
  }
  int64_t count = 0;
};

}  // namespace

TEST(TrainerApi, AStrategysCheckpointIsRefusedByAPlainTrainerAndViceVersa) {
  const testing::ScratchDir scratch;
  const std::string path = scratch.file("strategy.ht");
  ToyRun a;
  auto with_strategy = a.trainer(steps(5));
  with_strategy->set_strategy(std::make_unique<CountingStrategy>());
  for (int i = 0; i < 3; ++i) with_strategy->train_step();
  with_strategy->save_checkpoint(path);

  ToyRun b;
  auto plain = b.trainer(steps(5));
  const at::Tensor before = b.net->fc1->weight.clone();
  try {
    plain->load_checkpoint(path);
    FAIL() << "a strategy's checkpoint loaded into a plain run";
  } catch (const CheckpointMismatch& e) {
    EXPECT_EQ(e.part, "strategy") << e.what();
    EXPECT_NE(std::string(e.what()).find("'strategy'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(torch::equal(before, b.net->fc1->weight)) << "refused before anything was loaded";
  EXPECT_EQ(plain->step(), 0);

  const std::string plain_path = scratch.file("plain.ht");
  plain->train_step();
  plain->save_checkpoint(plain_path);
  ToyRun c;
  auto counting = c.trainer(steps(5));
  counting->set_strategy(std::make_unique<CountingStrategy>());
  EXPECT_THROW(counting->load_checkpoint(plain_path), CheckpointMismatch);
}

TEST(TrainerApi, ResumingFromADirectoryThatDoesNotExistSaysSo) {
  ToyRun run;
  auto trainer = run.trainer(steps(3));
  try {
    trainer->resume_latest("/nonexistent/ht-checkpoints");
    FAIL() << "a missing directory resumed nothing, silently";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ht-checkpoints"), std::string::npos) << e.what();
  }
  const testing::ScratchDir empty;
  EXPECT_EQ(trainer->resume_latest(empty.str()), "");  // exists, holds none: a fresh start
}

// ---- bad losses name the step and the batch --------------------------------------------------

TEST(TrainerApi, ANonScalarLossNamesTheStepAndTheBatch) {
  auto net = std::make_shared<ToyNet>();
  auto calls = std::make_shared<int>(0);
  auto objective = make_objective(net, [net, calls](const Batch& b) {
    const auto reduction = (*calls)++ == 0 ? torch::Reduction::Mean : torch::Reduction::None;  // then [B, 1]
    return torch::mse_loss(net->forward(b.input), b.target, reduction);
  });
  auto optimizer = testing::reference_adamw(net->parameters());
  ToyData data;
  Trainer trainer(*objective, *optimizer, data, steps(5));
  trainer.train_step();
  try {
    trainer.train_step();
    FAIL() << "a [64, 1] loss was accepted";
  } catch (const TrainingError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step 2 (batch 1 of epoch 0)"), std::string::npos) << what;
    EXPECT_NE(what.find("scalar"), std::string::npos) << what;
  }
}

TEST(TrainerApi, AShapeErrorInTheLossNamesTheStepAndTheBatch) {
  auto net = std::make_shared<ToyNet>();
  auto objective = make_objective(net, [net](const Batch& b) {
    return torch::mse_loss(net->forward(b.input).reshape({-1, 2}), b.target);  // shapes disagree
  });
  auto optimizer = testing::reference_adamw(net->parameters());
  ToyData data;
  Trainer trainer(*objective, *optimizer, data, steps(5));
  try {
    trainer.train_step();
    FAIL() << "the shape error escaped as a c10::Error";
  } catch (const TrainingError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step 1 (batch 0 of epoch 0)"), std::string::npos) << what;
    EXPECT_NE(what.find("loss function failed"), std::string::npos) << what;
  }
}

// ---- callbacks, metrics, history, seed -------------------------------------------------------

namespace {

class Hooks : public Callback {
 public:
  void on_train_begin(Trainer&) override { ++begins; }
  void after_backward(Trainer& t) override {
    ++backwards;
    if (freeze_fc2)  // acts: fc2 gets no update (zero gradient, no decay on the bias)
      for (auto& p : fc2_params) p.mutable_grad().zero_();
  }
  void after_optimizer_step(Trainer&) override { ++updates; }
  void on_step_end(Trainer& t, const StepRecord& r) override {
    last_step = r.step;
    if (stop_at > 0 && r.step == stop_at) t.request_stop();
  }
  void on_eval(Trainer&, const EvalRecord& r) override { evals.push_back(r.step); }
  void on_train_end(Trainer&, const EvalRecord& last) override { end_step = last.step; }
  int begins = 0, backwards = 0, updates = 0;
  int64_t last_step = 0, stop_at = 0, end_step = -1;
  bool freeze_fc2 = false;
  std::vector<at::Tensor> fc2_params;
  std::vector<int64_t> evals;
};

}  // namespace

TEST(TrainerApi, CallbacksSeeEveryStageAndCanStopTheRun) {
  ToyRun run;
  TrainerOptions o = steps(100);
  o.eval_every = 5;
  auto trainer = run.trainer(o);
  auto hooks = std::make_shared<Hooks>();
  hooks->stop_at = 12;
  trainer->add_callback(hooks);
  trainer->fit();
  EXPECT_EQ(trainer->step(), 12);
  EXPECT_EQ(hooks->begins, 1);
  EXPECT_EQ(hooks->backwards, 12);
  EXPECT_EQ(hooks->updates, 12);
  EXPECT_EQ(hooks->evals, (std::vector<int64_t>{5, 10, 12}));  // the last one is the run's end
  EXPECT_EQ(hooks->end_step, 12);
}

TEST(TrainerApi, ACallbackCanChangeTheGradientsBeforeTheUpdate) {
  ToyRun run;
  auto trainer = run.trainer(steps(10));
  auto hooks = std::make_shared<Hooks>();
  hooks->freeze_fc2 = true;
  hooks->fc2_params = {run.net->fc2->weight, run.net->fc2->bias};
  trainer->add_callback(hooks);
  const at::Tensor fc1 = run.net->fc1->weight.clone(), fc2_bias = run.net->fc2->bias.clone();
  trainer->fit();
  EXPECT_FALSE(torch::equal(fc1, run.net->fc1->weight));
  EXPECT_TRUE(torch::equal(fc2_bias, run.net->fc2->bias));  // zero gradients: Adam moves it by 0
}

TEST(TrainerApi, UserMetricsAndTheEvaluationHistorySurviveAResume) {
  const testing::ScratchDir scratch;
  auto mae = [](ToyRun& run) {
    return [net = run.net](const Batch& b) { return (net->forward(b.input) - b.target).abs().mean().item<double>(); };
  };
  TrainerOptions o = steps(20);
  o.eval_every = 5;
  o.checkpoint.dir = scratch.str();
  o.checkpoint.every_steps = 10;
  ToyRun straight;
  auto a = straight.trainer(o);
  a->add_metric("mae", mae(straight));
  a->fit();
  ASSERT_EQ(a->evaluations().size(), 4u);
  for (const auto& e : a->evaluations()) {
    ASSERT_TRUE(e.metrics.count("mae")) << e.step;
    EXPECT_GT(e.metrics.at("mae"), 0.0);
    EXPECT_LT(e.metrics.at("mae"), std::sqrt(e.val_loss) + 1e-9);  // mean |e| <= rms e
  }
  EXPECT_THROW(a->add_metric("mae", mae(straight)), OptionsError);

  ToyRun resumed;
  auto b = resumed.trainer(o);
  b->add_metric("mae", mae(resumed));
  b->load_checkpoint(checkpoint_path(scratch.str(), 10));
  ASSERT_EQ(b->evaluations().size(), 2u);  // steps 5 and 10, from the checkpoint
  b->fit();
  ASSERT_EQ(b->evaluations().size(), a->evaluations().size());
  for (size_t i = 0; i < a->evaluations().size(); ++i) {
    EXPECT_EQ(b->evaluations()[i].step, a->evaluations()[i].step);
    EXPECT_EQ(b->evaluations()[i].val_loss, a->evaluations()[i].val_loss);
    EXPECT_EQ(b->evaluations()[i].metrics.at("mae"), a->evaluations()[i].metrics.at("mae"));
  }
}

TEST(TrainerApi, TheSeedOptionMakesRandomDrawsInTheLossRepeat) {
  auto noisy_run = [](int64_t seed) {
    torch::manual_seed(1);
    auto net = std::make_shared<ToyNet>();
    auto objective = make_objective(net, [net](const Batch& b) {
      return torch::mse_loss(net->forward(b.input + 0.1 * torch::randn_like(b.input)), b.target);
    });
    auto optimizer = testing::reference_adamw(net->parameters());
    ToyData data;
    torch::manual_seed(12345 + seed * 7);  // whatever happened before the trainer
    TrainerOptions o = steps(10);
    o.seed = 5;
    Trainer trainer(*objective, *optimizer, data, o);
    trainer.fit();
    return net->fc1->weight.clone();
  };
  EXPECT_TRUE(torch::equal(noisy_run(0), noisy_run(1)));
}

}  // namespace ht
