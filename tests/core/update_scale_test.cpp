// UpdateScaleCallback: the chosen slice moves by factor times the optimizer's update and nothing
// else changes; the scaling stops at until_step; slices outside the parameters are named.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/trainer.h"
#include "hybrid/core/update_scale.h"
#include "support/toy_run.h"

namespace ht {
namespace {

// Two runs from the same weights and batches: one plain, one with the callback.
struct ToyRun : testing::ToyAdamWRun {
  std::unique_ptr<Trainer> trainer;
  ToyRun() : ToyAdamWRun(/*lr=*/0.05, /*seed=*/3) {
    TrainerOptions t;
    t.max_steps = 10;
    trainer = ToyAdamWRun::trainer(t);
  }
  at::Tensor param(size_t i) const { return optimizer->parameters()[i].detach().clone(); }
};

// fc1.weight [32, 2] is parameter 0: its rows 4-11.
const ParamSlice kRows{/*index=*/0, /*dim=*/0, /*begin=*/4, /*end=*/12};

TEST(UpdateScale, TheSliceMovesByTheFactorTimesTheUpdateAndNothingElseChanges) {
  ToyRun plain, scaled;
  scaled.trainer->add_callback(std::make_shared<UpdateScaleCallback>(std::vector<ParamSlice>{kRows}, 0.25, 0));
  const at::Tensor start = plain.param(0);
  plain.trainer->train_step();
  scaled.trainer->train_step();
  const at::Tensor full = plain.param(0).narrow(0, 4, 8) - start.narrow(0, 4, 8);
  const at::Tensor got = scaled.param(0).narrow(0, 4, 8) - start.narrow(0, 4, 8);
  ASSERT_GT(full.abs().max().item<float>(), 1e-3);  // the step moved the rows
  EXPECT_TRUE(torch::allclose(got, 0.25 * full, /*rtol=*/1e-5, /*atol=*/1e-7));
  // Rows outside the slice and the other parameters: the plain run's, bit for bit.
  EXPECT_TRUE(torch::equal(scaled.param(0).narrow(0, 0, 4), plain.param(0).narrow(0, 0, 4)));
  EXPECT_TRUE(torch::equal(scaled.param(0).narrow(0, 12, 20), plain.param(0).narrow(0, 12, 20)));
  for (size_t i = 1; i < plain.optimizer->parameters().size(); ++i)
    EXPECT_TRUE(torch::equal(scaled.param(i), plain.param(i))) << "parameter " << i;
}

TEST(UpdateScale, ASliceAlongColumnsScalesThoseColumns) {
  ToyRun plain, scaled;
  const ParamSlice column{0, /*dim=*/1, 1, 2};  // fc1.weight's second input column
  scaled.trainer->add_callback(std::make_shared<UpdateScaleCallback>(std::vector<ParamSlice>{column}, 0.0, 0));
  const at::Tensor start = plain.param(0);
  plain.trainer->train_step();
  scaled.trainer->train_step();
  EXPECT_TRUE(torch::equal(scaled.param(0).select(1, 1), start.select(1, 1)));  // factor 0: frozen
  EXPECT_TRUE(torch::equal(scaled.param(0).select(1, 0), plain.param(0).select(1, 0)));
}

TEST(UpdateScale, TheScalingStopsAtUntilStep) {
  ToyRun throughout, until2;
  throughout.trainer->add_callback(std::make_shared<UpdateScaleCallback>(std::vector<ParamSlice>{kRows}, 0.25, 0));
  until2.trainer->add_callback(std::make_shared<UpdateScaleCallback>(std::vector<ParamSlice>{kRows}, 0.25, 2));
  for (int i = 0; i < 2; ++i) {
    throughout.trainer->train_step();
    until2.trainer->train_step();
  }
  EXPECT_TRUE(torch::equal(until2.param(0), throughout.param(0)));  // steps 0 and 1: both scaled
  const at::Tensor before = until2.param(0).narrow(0, 4, 8);
  throughout.trainer->train_step();
  until2.trainer->train_step();
  // Step 2 is past until_step: the same gradients and moments, so an update four times as large.
  const at::Tensor scaled = throughout.param(0).narrow(0, 4, 8) - before;
  const at::Tensor unscaled = until2.param(0).narrow(0, 4, 8) - before;
  EXPECT_TRUE(torch::allclose(unscaled, 4.0 * scaled, 1e-4, 1e-7));
  EXPECT_TRUE(torch::equal(until2.param(1), throughout.param(1)));
}

TEST(UpdateScale, ASliceOutsideTheParametersIsNamed) {
  ToyRun run;
  run.trainer->add_callback(std::make_shared<UpdateScaleCallback>(std::vector<ParamSlice>{{0, 0, 30, 40}}, 0.5, 0));
  try {
    run.trainer->train_step();
    FAIL() << "expected an error";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("[30, 40) along dim 0 of parameter 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(UpdateScaleCallback({{0, 0, 5, 5}}, 0.5, 0), std::invalid_argument);
  EXPECT_THROW(UpdateScaleCallback({kRows}, -1.0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ht
