// Activation recompute chosen per phase: the hooks the CLI wires into the trainer switch the GPT's
// level as hybrid moves between warmup, full and correct steps, and the ladder's choice sticks.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/trainer.h"
#include "hybrid-train/config.h"
#include "hybrid-train/session.h"

namespace ht {
namespace {

class RandomTokens : public DataSource {
 public:
  Batch next_train_batch() override {
    ++cursor_.position;
    return {torch::randint(256, {8, 128}), torch::randint(256, {8, 128})};
  }
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 0; }
  Batch val_batch(int64_t) const override { return {}; }
  int64_t items_per_batch() const override { return 8 * 128; }

 private:
  DataCursor cursor_;
};

cli::Config hybrid_config(const std::vector<std::string>& extra) {
  cli::Config c;
  for (const char* o : {"run.threads=2", "run.mode=hybrid", "model.preset=tiny", "data.context=128",
                        "hybrid.warmup_steps=2", "hybrid.full_steps=2"})
    c.set_override(o);
  for (const auto& o : extra) c.set_override(o);
  return c;
}

TEST(RecomputePerPhase, WarmupAndFullStepsRunTheirOwnLevel) {
  install_tracking_allocator();
  const cli::Config c = hybrid_config({"memory.recompute_warmup=none", "memory.recompute_full=full"});
  cli::Session s = cli::build_session(c, /*with_data=*/false);
  RandomTokens data;
  TrainerOptions o = cli::trainer_options(c);
  o.max_steps = 6;
  cli::set_recompute_hooks(s, c, o);
  Trainer trainer(*s.objective, *s.optimizer, data, o);
  trainer.set_strategy(cli::build_strategy(c));
  std::vector<StepRecord> recs;
  std::vector<std::string> levels;
  for (int i = 0; i < 5; ++i) {
    recs.push_back(trainer.train_step());
    levels.push_back(s.recompute);
  }
  ASSERT_EQ(recs[1].phase, ht::Phase::Warmup);
  ASSERT_EQ(recs[3].phase, ht::Phase::Full);
  EXPECT_EQ(levels[1], "none");
  EXPECT_EQ(levels[3], "full");
  // What the level is for: the full steps' forward keeps far less for backward. Each step's
  // forward peak is taken above what lived before it; step 1 is left out (it also allocates the
  // gradients and AdamW's moments).
  const double warmup = static_cast<double>(recs[1].peak_forward_bytes - recs[0].tensor_bytes);
  const double full = static_cast<double>(recs[3].peak_forward_bytes - recs[2].tensor_bytes);
  std::printf("[ measured ] forward above resident: warmup (none) %.2f MiB, full (full recompute) %.2f MiB\n",
              warmup / 1048576.0, full / 1048576.0);
  EXPECT_LT(full, 0.5 * warmup);
}

TEST(RecomputePerPhase, TheLaddersFullRecomputeStaysOnInEveryPhase) {
  const cli::Config c = hybrid_config({"memory.recompute=none"});
  cli::Session s = cli::build_session(c, false);
  TrainerOptions o = cli::trainer_options(c);
  cli::set_recompute_hooks(s, c, o);
  o.memory.on_phase(Phase::Warmup);
  EXPECT_EQ(s.recompute, "none");
  ASSERT_TRUE(o.memory.enable_recompute());
  EXPECT_EQ(s.recompute, "full");
  o.memory.on_phase(Phase::Full);
  o.memory.on_phase(Phase::Correct);
  EXPECT_EQ(s.recompute, "full");
  EXPECT_FALSE(o.memory.enable_recompute()) << "nothing more to turn on";
}

}  // namespace
}  // namespace ht
