// Lookahead baseline: synchronises every k steps to slow += alpha (fast - slow), trains, resumes.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>

#include "hybrid/hybrid/strategy.h"
#include "toy_problems.h"

TEST(Lookahead, SyncsEveryKStepsToTheInterpolatedWeights) {
  toy::BowlRun run(10);
  run.trainer->set_strategy(ht::make_lookahead_strategy(3, 0.5));
  const at::Tensor w0 = run.bowl->w.detach().clone();
  // Three SGD steps from w0 give the fast weights; the sync lands halfway back to w0.
  toy::BowlRun fast(3);
  for (int i = 0; i < 3; ++i) fast.trainer->train_step();
  for (int i = 0; i < 3; ++i) {
    const ht::StepRecord r = run.trainer->train_step();
    EXPECT_EQ(r.extra.at("lookahead_sync"), i == 2 ? 1.0 : 0.0);
  }
  EXPECT_TRUE(torch::allclose(run.bowl->w, w0 + 0.5 * (fast.bowl->w - w0)));
  EXPECT_THROW(ht::make_lookahead_strategy(0, 0.5), std::invalid_argument);
  EXPECT_THROW(ht::make_lookahead_strategy(5, 1.5), std::invalid_argument);
}

TEST(Lookahead, TrainsTheMlpAndResumesBitExactly) {
  const auto path = std::filesystem::temp_directory_path() / "ht_lookahead_test.ht";
  toy::MlpRun a(300);
  a.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.5));
  const double start = a.val_loss();
  for (int i = 0; i < 152; ++i) a.trainer->train_step();  // mid-way between two syncs
  a.trainer->save_checkpoint(path.string());
  for (int i = 152; i < 300; ++i) a.trainer->train_step();
  EXPECT_LT(a.val_loss(), 0.5 * start);

  toy::MlpRun b(300, 3e-3, 42);
  b.trainer->set_strategy(ht::make_lookahead_strategy(5, 0.5));
  b.trainer->load_checkpoint(path.string());
  for (int i = 152; i < 300; ++i) b.trainer->train_step();
  EXPECT_TRUE(toy::all_equal(a.optimizer->parameters(), b.optimizer->parameters()));
  std::filesystem::remove(path);
}
