// optim.name=muon through the CLI's session: the model's MuonLayout decides which parameters are
// orthogonalized - on a GPT the lookup tables (wte, wpe) take AdamW's step, c_attn its q/k/v thirds;
// with optim.muon_hidden_only an MLP's input layer and head take AdamW's step too.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/trainer.h"
#include "hybrid-train/config.h"
#include "hybrid-train/session.h"
#include "support/fixed_tokens.h"

namespace ht {
namespace {

constexpr int64_t kEmbd = 32;

cli::Config config(std::vector<std::string> base, const std::vector<std::string>& extra) {
  cli::Config c;
  base.insert(base.end(), {"run.threads=1", "schedule.warmup_steps=0", "optim.lr=0.01", "optim.weight_decay=0"});
  for (const auto& o : base) c.set_override(o);
  for (const auto& o : extra) c.set_override(o);
  return c;
}

cli::Config gpt_config(const std::vector<std::string>& extra) {
  return config({"model.n_layer=2", "model.n_embd=32", "model.n_head=2", "data.context=64"}, extra);
}

cli::Config mlp_config(const std::vector<std::string>& extra) {
  return config({"model.kind=mlp", "data.dataset=fashion-mnist", "data.batch_size=16"}, extra);
}

// One fixed batch of 16 random 28 x 28 images and labels, every step.
class FixedImages : public DataSource {
 public:
  FixedImages() {
    torch::manual_seed(7);
    images_ = torch::rand({16, 1, 28, 28});
    labels_ = torch::randint(10, {16});
  }
  Batch next_train_batch() override {
    ++cursor_.position;
    return {images_, labels_};
  }
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 0; }
  Batch val_batch(int64_t) const override { return {}; }
  int64_t items_per_batch() const override { return 16; }

 private:
  at::Tensor images_, labels_;
  DataCursor cursor_;
};

// Each parameter's change over one step of a fresh session (seeded by run.seed) on one fixed
// batch: tokens for a GPT, images for the MLP.
torch::OrderedDict<std::string, at::Tensor> one_step_change(const cli::Config& c) {
  cli::Session s = cli::build_session(c, /*with_data=*/false);
  torch::OrderedDict<std::string, at::Tensor> change;
  for (const auto& p : s.module->named_parameters()) change.insert(p.key(), p.value().detach().clone());
  testing::FixedTokens tokens;
  FixedImages images;
  DataSource& data = c.get_string("model.kind") == "mlp" ? static_cast<DataSource&>(images) : tokens;
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

// Largest over k-th singular value. A gradient of 16 images has rank <= 16, so an orthogonalized
// MLP update has ~16 singular values in ~[0.7, 1.2] and the rest ~0: the median says nothing there.
double top_condition(const at::Tensor& m, int64_t k) {
  const at::Tensor s = at::linalg_svdvals(m.to(at::kDouble));  // descending
  return (s[0] / s[k - 1]).item<double>();
}

// Jordan's recipe: Muon for the hidden matrix (fc2) only; the input layer (fc1, [512, 784], the
// costliest orthogonalization) and the head (fc3) take AdamW's step, as the biases always do.
TEST(MuonLayout, HiddenOnlyGivesTheMlpsInputLayerAndHeadAdamWsStep) {
  const auto adamw = one_step_change(mlp_config({}));
  const auto all = one_step_change(mlp_config({"optim.name=muon"}));
  const auto hidden = one_step_change(mlp_config({"optim.name=muon", "optim.muon_hidden_only=true"}));
  for (const auto& p : adamw) {
    const std::string& name = p.key();
    ASSERT_GT(hidden[name].abs().max().item<float>(), 0.0f) << name << " did not move";
    if (name == "fc2.weight") {
      EXPECT_LT(top_condition(hidden[name], 8), 2.0);
      EXPECT_TRUE(torch::allclose(hidden[name], all[name], 1e-5, 1e-9)) << "fc2 is Muon's either way";
    } else {
      EXPECT_TRUE(torch::allclose(hidden[name], p.value(), 1e-5, 1e-9)) << name << ": not AdamW's step";
    }
  }
  for (const char* name : {"fc1.weight", "fc3.weight"})  // without the option: orthogonalized
    EXPECT_FALSE(torch::allclose(all[name], adamw[name], 1e-3, 1e-7)) << name << ": AdamW's step, not Muon's";
  EXPECT_LT(top_condition(all["fc1.weight"], 8), 2.0);
  EXPECT_GT(top_condition(adamw["fc2.weight"], 8), 2.0);  // the check tells the two steps apart
}

}  // namespace
}  // namespace ht
