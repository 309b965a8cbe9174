// optim.name=muon through the CLI's session: the model's MuonLayout decides which parameters are
// orthogonalized - on a GPT the lookup tables (wte, wpe) take AdamW's step, c_attn its q/k/v thirds.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/trainer.h"
#include "hybrid-train/config.h"
#include "hybrid-train/session.h"
#include "support/fixed_tokens.h"

namespace ht {
namespace {

constexpr int64_t kEmbd = 32;

cli::Config gpt_config(const std::vector<std::string>& extra) {
  cli::Config c;
  for (const char* o : {"run.threads=1", "model.n_layer=2", "model.n_embd=32", "model.n_head=2", "data.context=64",
                        "schedule.warmup_steps=0", "optim.lr=0.01", "optim.weight_decay=0"})
    c.set_override(o);
  for (const auto& o : extra) c.set_override(o);
  return c;
}

// Each parameter's change over one step of a fresh session (seeded by run.seed) on fixed tokens.
torch::OrderedDict<std::string, at::Tensor> one_step_change(const cli::Config& c) {
  cli::Session s = cli::build_session(c, /*with_data=*/false);
  torch::OrderedDict<std::string, at::Tensor> change;
  for (const auto& p : s.module->named_parameters()) change.insert(p.key(), p.value().detach().clone());
  testing::FixedTokens data;
  TrainerOptions o = cli::trainer_options(c);
  o.max_steps = 1;
  Trainer trainer(*s.objective, *s.optimizer, data, o);
  trainer.train_step();
  for (const auto& p : s.module->named_parameters()) change[p.key()] = p.value().detach() - change[p.key()];
  return change;
}

// Largest over median singular value: 1.2-1.6 for the orthogonalized updates here (five Newton-Schulz
// iterations leave the upper half in ~[0.7, 1.2]; the gradient's smallest stay small), 2.0-5.3
// for AdamW's first step on the same matrices.
double condition(const at::Tensor& m) {
  const at::Tensor s = at::linalg_svdvals(m.to(at::kDouble));
  return (s.max() / s.median()).item<double>();
}

TEST(MuonLayout, GptLookupTablesTakeAdamWsStepAndCAttnIsOrthogonalizedPerThird) {
  const auto adamw = one_step_change(gpt_config({}));
  const auto muon = one_step_change(gpt_config({"optim.name=muon"}));
  int fused = 0;
  for (const auto& p : adamw) {
    const std::string& name = p.key();
    const at::Tensor& m = muon[name];
    ASSERT_GT(m.abs().max().item<float>(), 0.0f) << name << " did not move";
    if (m.dim() < 2 || name == "wte.weight" || name == "wpe.weight") {
      EXPECT_TRUE(torch::allclose(m, p.value(), 1e-5, 1e-9)) << name << ": not AdamW's step";
      continue;
    }
    EXPECT_FALSE(torch::allclose(m, p.value(), 1e-3, 1e-7)) << name << ": AdamW's step, not Muon's";
    if (name.find("c_attn.weight") == std::string::npos) {
      EXPECT_LT(condition(m), 2.0) << name;
      continue;
    }
    ++fused;
    for (int64_t part = 0; part < 3; ++part)  // [C, 3C]: q | k | v, each [C, C] orthogonalized on its own
      EXPECT_LT(condition(m.narrow(1, part * kEmbd, kEmbd)), 2.0) << name << " third " << part;
  }
  EXPECT_EQ(fused, 2);
}

TEST(MuonLayout, UnsplitCAttnIsOrthogonalizedWhole) {
  const auto whole = one_step_change(gpt_config({"optim.name=muon", "optim.muon_split_qkv=false"}));
  const auto split = one_step_change(gpt_config({"optim.name=muon"}));
  const at::Tensor& w = whole["h.0.attn.c_attn.weight"];  // [C, 3C]
  EXPECT_LT(condition(w), 2.0);
  EXPECT_FALSE(torch::allclose(w, split["h.0.attn.c_attn.weight"], 1e-3, 1e-7));
  EXPECT_TRUE(torch::equal(whole["h.0.mlp.c_fc.weight"], split["h.0.mlp.c_fc.weight"]));
  // Orthogonalized whole, the thirds share one spectrum: at initialisation the query's gradient is
  // small beside the value's, so its third keeps a steep spectrum of its own (~50 here).
  EXPECT_GT(condition(w.narrow(1, 0, kEmbd)), 10.0);
}

}  // namespace
}  // namespace ht
