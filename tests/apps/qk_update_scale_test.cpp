// optim.qk_update_scale through the CLI's session: on a GPT it scales the query and key columns
// of every c_attn.weight and nothing else; on a model without attention it is a named error.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/trainer.h"
#include "hybrid-train/config.h"
#include "hybrid-train/session.h"
#include "support/fixed_tokens.h"

namespace ht {
namespace {

cli::Config gpt_config(const std::string& scale) {
  cli::Config c;
  for (const std::string& o : {std::string("run.threads=1"), std::string("model.n_layer=2"), std::string("model.n_embd=32"),
                               std::string("model.n_head=2"), std::string("data.context=64"), std::string("schedule.warmup_steps=0"),
                               "optim.qk_update_scale=" + scale})
    c.set_override(o);
  return c;
}

// The weights after one step of a fresh session (seeded by run.seed) with its callbacks.
torch::OrderedDict<std::string, at::Tensor> one_step(const cli::Config& c) {
  cli::Session s = cli::build_session(c, /*with_data=*/false);
  testing::FixedTokens data;
  TrainerOptions o = cli::trainer_options(c);
  o.max_steps = 1;
  Trainer trainer(*s.objective, *s.optimizer, data, o);
  for (auto& callback : cli::build_callbacks(c, s)) trainer.add_callback(callback);
  trainer.train_step();
  torch::OrderedDict<std::string, at::Tensor> after;
  for (const auto& p : s.module->named_parameters()) after.insert(p.key(), p.value().detach().clone());
  return after;
}

TEST(QkUpdateScale, ScalesTheQueryAndKeyColumnsOfEveryBlockAndNothingElse) {
  const cli::Config plain_config = gpt_config("1");
  EXPECT_TRUE(cli::build_callbacks(plain_config, cli::build_session(plain_config, false)).empty());
  cli::Session fresh = cli::build_session(plain_config, false);  // the weights before the step
  const auto plain = one_step(plain_config);
  const auto scaled = one_step(gpt_config("0.5"));
  const int64_t C = 32;
  int blocks = 0;
  for (const auto& p : fresh.module->named_parameters()) {
    const at::Tensor& start = p.value();
    const at::Tensor& a = plain[p.key()];
    const at::Tensor& b = scaled[p.key()];
    if (p.key().find("attn.c_attn.weight") == std::string::npos) {
      EXPECT_TRUE(torch::equal(a, b)) << p.key();
      continue;
    }
    ++blocks;
    const at::Tensor qk_plain = a.narrow(1, 0, 2 * C) - start.narrow(1, 0, 2 * C);  // [C, 2C]
    const at::Tensor qk_scaled = b.narrow(1, 0, 2 * C) - start.narrow(1, 0, 2 * C);
    ASSERT_GT(qk_plain.abs().max().item<float>(), 1e-4) << p.key();
    EXPECT_TRUE(torch::allclose(qk_scaled, 0.5 * qk_plain, 1e-4, 1e-7)) << p.key();
    EXPECT_TRUE(torch::equal(a.narrow(1, 2 * C, C), b.narrow(1, 2 * C, C))) << p.key() << ": the value columns";
  }
  EXPECT_EQ(blocks, 2);
}

TEST(QkUpdateScale, AModelWithoutAttentionIsANamedError) {
  cli::Config c;
  for (const char* o : {"model.kind=mlp", "data.dataset=fashion-mnist", "optim.qk_update_scale=0.33"}) c.set_override(o);
  cli::Session s = cli::build_session(c, /*with_data=*/false);
  try {
    cli::build_callbacks(c, s);
    FAIL() << "expected a ConfigError";
  } catch (const cli::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("optim.qk_update_scale = 0.33: model.kind = mlp has no attention maps"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ht
