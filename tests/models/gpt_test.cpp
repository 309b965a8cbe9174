// GPT-2 model tests: the HF parameter layout, shapes, causality, the fused loss against plain
// cross entropy, and that a few optimizer steps overfit a fixed batch.
#include <cmath>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/data.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/models/generate.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"
#include "hybrid/kernels/lm_head_loss.h"
#include "hybrid/kernels/recompute.h"

namespace ht {
namespace {

GPTConfig small_config() {
  GPTConfig c = gpt_preset("tiny");
  c.n_layer = 2;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 97;
  return c;
}

TEST(GPT, Gpt2PresetMatchesHuggingFaceLayoutAndCount) {
  torch::manual_seed(0);
  GPT model(gpt_preset("gpt2"));
  const int64_t V = 50257, ctx = 1024, C = 768;
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"wte.weight", {V, C}}, {"wpe.weight", {ctx, C}}};
  for (int i = 0; i < 12; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    const std::vector<std::pair<std::string, std::vector<int64_t>>> block = {
        {p + "ln_1.weight", {C}},
        {p + "ln_1.bias", {C}},
        {p + "attn.c_attn.weight", {C, 3 * C}},
        {p + "attn.c_attn.bias", {3 * C}},
        {p + "attn.c_proj.weight", {C, C}},
        {p + "attn.c_proj.bias", {C}},
        {p + "ln_2.weight", {C}},
        {p + "ln_2.bias", {C}},
        {p + "mlp.c_fc.weight", {C, 4 * C}},
        {p + "mlp.c_fc.bias", {4 * C}},
        {p + "mlp.c_proj.weight", {4 * C, C}},
        {p + "mlp.c_proj.bias", {C}},
    };
    expected.insert(expected.end(), block.begin(), block.end());
  }
  expected.push_back({"ln_f.weight", {C}});
  expected.push_back({"ln_f.bias", {C}});

  const auto params = model.named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].key(), expected[i].first);
    EXPECT_EQ(params[i].value().sizes().vec(), expected[i].second) << expected[i].first;
  }
  EXPECT_TRUE(model.named_buffers().is_empty());
  EXPECT_EQ(model.num_parameters(), 124'439'808);
  EXPECT_EQ(model.num_parameters(/*include_position_embeddings=*/false), 124'439'808 - ctx * C);
}

TEST(GPT, PresetsHaveTheirSizesAndUnknownNamesAreListed) {
  EXPECT_EQ(gpt_preset("gpt2-medium").n_layer, 24);
  EXPECT_EQ(gpt_preset("gpt2-medium").n_embd, 1024);
  EXPECT_EQ(gpt_preset("gpt2-large").n_head, 20);
  EXPECT_EQ(gpt_preset("gpt2-xl").n_embd, 1600);
  EXPECT_EQ(gpt_preset("tiny").block_size, 128);
  try {
    gpt_preset("gpt3");
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpt3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gpt2-medium"), std::string::npos);
  }
}

TEST(GPT, InitialisationFollowsGpt2) {
  torch::manual_seed(0);
  GPTConfig c = gpt_preset("tiny");
  GPT model(c);
  const auto p = model.named_parameters();
  EXPECT_NEAR(p["wte.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(p["h.0.attn.c_attn.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(p["h.1.mlp.c_proj.weight"].std().item<double>(), 0.02 / std::sqrt(2.0 * 4), 0.0005);
  EXPECT_EQ(p["h.2.mlp.c_fc.bias"].abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(p["ln_f.weight"].eq(1).all().item<bool>());
}

TEST(GPT, ForwardShapesAndTiedHead) {
  torch::manual_seed(0);
  GPT model(gpt_preset("tiny"));
  const auto idx = torch::randint(256, {3, 17}, torch::kLong);
  const auto logits = model.forward(idx);
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{3, 17, 256}));
  const auto h = model.hidden(idx);
  EXPECT_EQ(h.sizes().vec(), (std::vector<int64_t>{3, 17, 128}));
  EXPECT_TRUE(torch::allclose(logits, torch::matmul(h, model.token_embedding().t()), 1e-5, 1e-5));
  EXPECT_THROW(model.forward(torch::randint(256, {1, 129}, torch::kLong)), c10::Error);
}

TEST(GPT, IsCausal) {
  torch::manual_seed(0);
  GPT model(small_config());
  const auto idx = torch::randint(97, {2, 20}, torch::kLong);
  auto changed = idx.clone();
  changed.index_put_({torch::indexing::Slice(), 12}, (idx.select(1, 12) + 1) % 97);
  torch::NoGradGuard no_grad;
  const auto a = model.forward(idx), b = model.forward(changed);
  const auto before = torch::indexing::Slice(0, 12);
  EXPECT_TRUE(torch::equal(a.index({torch::indexing::Slice(), before}),
                           b.index({torch::indexing::Slice(), before})));
  EXPECT_GT((a.select(1, 12) - b.select(1, 12)).abs().max().item<double>(), 1e-4);
}

TEST(GPT, LossAtInitIsNearLogVocab) {
  torch::manual_seed(0);
  GPT model(gpt_preset("tiny"));
  const auto idx = torch::randint(256, {8, 64}, torch::kLong);
  const auto tgt = torch::randint(256, {8, 64}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_NEAR(model.loss(idx, tgt).item<double>(), std::log(256.0), 0.1);
}

TEST(GPT, FusedLossAndGradientsMatchPlainCrossEntropy) {
  torch::manual_seed(0);
  GPT model(small_config());
  const auto idx = torch::randint(97, {4, 32}, torch::kLong);
  const auto tgt = torch::randint(97, {4, 32}, torch::kLong);

  const auto fused = model.loss(idx, tgt);
  fused.backward();
  std::vector<at::Tensor> fused_grads;
  for (auto& p : model.parameters()) fused_grads.push_back(p.grad().clone());
  model.zero_grad();

  const auto plain = torch::nn::functional::cross_entropy(model.forward(idx).view({-1, 97}),
                                                          tgt.view({-1}));
  plain.backward();
  EXPECT_NEAR(fused.item<double>(), plain.item<double>(), 1e-5);
  const auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(fused_grads[i], params[i].grad(), 1e-4, 1e-6)) << i;
  }
}

TEST(GPT, FusedLossChunksLargeVocabularies) {
  // 2^24 / 70000 = 239 rows per chunk, so 600 rows take three chunks.
  torch::manual_seed(0);
  const auto h = torch::randn({600, 8}, torch::requires_grad());
  const auto w = (torch::randn({70000, 8}) * 0.3).requires_grad_();
  const auto t = torch::randint(70000, {600}, torch::kLong);
  const auto fused = lm_head_cross_entropy(h, w, t);
  (fused * 3.0).backward();  // a non-unit upstream gradient
  const auto gh = h.grad().clone(), gw = w.grad().clone();
  h.grad().zero_();
  w.grad().zero_();
  const auto plain = torch::nn::functional::cross_entropy(torch::mm(h, w.t()), t);
  (plain * 3.0).backward();
  EXPECT_NEAR(fused.item<double>(), plain.item<double>(), 1e-4);
  EXPECT_TRUE(torch::allclose(gh, h.grad(), 1e-4, 1e-7));
  EXPECT_TRUE(torch::allclose(gw, w.grad(), 1e-4, 1e-7));
  EXPECT_THROW(lm_head_cross_entropy(h, w, t + 70000), c10::Error);
}

TEST(GPT, AdamWOverfitsAFixedBatch) {
  torch::manual_seed(0);
  auto model = std::make_shared<GPT>(small_config());
  auto objective = make_gpt_objective(model);
  const Batch batch{torch::randint(97, {4, 32}, torch::kLong),
                    torch::randint(97, {4, 32}, torch::kLong)};
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    const auto loss = objective->loss(batch);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(97.0), 0.2);
  EXPECT_LT(last, 0.3 * first);

  torch::NoGradGuard no_grad;
  const auto stats = objective->evaluate(batch);
  EXPECT_EQ(stats.count, 4 * 32);
  EXPECT_NEAR(stats.loss_sum / stats.count, model->loss(batch.input, batch.target).item<double>(),
              1e-6);
}

TEST(GPT, BlockRunnerAndAttentionCoreAreSeams) {
  torch::manual_seed(0);
  GPT model(small_config());
  const auto idx = torch::randint(97, {2, 10}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto reference = model.forward(idx);

  std::vector<int64_t> layers_seen;
  model.set_block_runner([&](const BlockFn& block, const at::Tensor& x, int64_t layer) {
    layers_seen.push_back(layer);
    return block(x);
  });
  EXPECT_TRUE(torch::equal(model.forward(idx), reference));
  EXPECT_EQ(layers_seen, (std::vector<int64_t>{0, 1}));
  model.set_block_runner(nullptr);

  // A core written out differently (masked_fill, plain matmul) must agree with "naive".
  int calls = 0;
  model.set_attention_core([&](const at::Tensor& qkv, int64_t n_head, double) {
    ++calls;
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    const auto parts = qkv.view({B, T, 3, n_head, C / n_head}).permute({2, 0, 3, 1, 4});
    const auto q = parts[0], k = parts[1], v = parts[2];  // [B, nh, T, hs]
    auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(C / n_head));
    att = att.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY).softmax(-1);
    return torch::matmul(att, v).transpose(1, 2).reshape({B, T, C});
  });
  EXPECT_TRUE(torch::allclose(model.forward(idx), reference, 1e-5, 1e-5));
  EXPECT_EQ(calls, 2);
  EXPECT_THROW(parse_attention_kind("flash2"), std::invalid_argument);
}

TEST(GPT, SelectiveGeluRecomputeGivesTheSameLossAndGradients) {
  for (const Precision precision : {Precision::FP32, Precision::BF16}) {  // recompute follows bf16
    torch::manual_seed(0);
    GPTConfig c = small_config();
    c.precision = precision;
    GPT model(c);
    const auto idx = torch::randint(97, {2, 10}, torch::kLong);
    const auto tgt = torch::randint(97, {2, 10}, torch::kLong);
    auto grads = [&] {
      model.zero_grad();
      const auto loss = model.loss(idx, tgt);
      loss.backward();
      std::vector<at::Tensor> g{loss.detach().clone()};
      for (const auto& p : model.parameters()) g.push_back(p.grad().clone());
      return g;
    };
    const auto plain = grads();
    model.set_recompute_gelu(true);
    const auto recomputed = grads();
    ASSERT_EQ(plain.size(), recomputed.size());
    // The same ops on the same inputs: equal, not merely close.
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(torch::equal(plain[i], recomputed[i])) << "tensor " << i << " " << to_string(precision);
    // Whole blocks recomputed through the BlockRunner seam: equal too.
    model.set_recompute_gelu(false);
    model.set_block_runner([](const BlockFn& block, const at::Tensor& x, int64_t) { return recompute(block, x, {}); });
    const auto blocks = grads();
    model.set_block_runner(nullptr);
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(torch::equal(plain[i], blocks[i])) << "tensor " << i << " " << to_string(precision);
  }
}

TEST(GPT, DropoutOnlyActsInTraining) {
  torch::manual_seed(0);
  GPTConfig c = small_config();
  c.dropout = 0.1;
  GPT model(c);
  const auto idx = torch::randint(97, {2, 10}, torch::kLong);
  torch::NoGradGuard no_grad;
  model.eval();
  EXPECT_TRUE(torch::equal(model.forward(idx), model.forward(idx)));
  model.train();
  EXPECT_FALSE(torch::equal(model.forward(idx), model.forward(idx)));
}


// bf16 mixed precision on a small GPT: the same fp32 weights give a loss and gradients within
// bf16 tolerance of fp32's; the parameters and their gradients stay fp32.
TEST(GPT, Bf16LossAndGradientsWithinToleranceOfFp32) {
  for (const AttentionKind attention : {AttentionKind::Naive, AttentionKind::Flash}) {
    torch::manual_seed(0);
    GPTConfig c = small_config();
    c.attention = attention;
    GPT model(c);
    const auto idx = torch::randint(97, {4, 32}, torch::kLong);
    const auto tgt = torch::randint(97, {4, 32}, torch::kLong);
    auto loss_and_grads = [&](Precision p) {
      model.set_precision(p);
      model.zero_grad();
      const auto loss = model.loss(idx, tgt);
      loss.backward();
      std::map<std::string, at::Tensor> g;
      for (const auto& kv : model.named_parameters()) g[kv.key()] = kv.value().grad().clone();
      return std::make_pair(loss, g);
    };
    const auto [loss32, g32] = loss_and_grads(Precision::FP32);
    const auto [loss16, g16] = loss_and_grads(Precision::BF16);
    EXPECT_EQ(loss16.scalar_type(), torch::kFloat);
    EXPECT_NEAR(loss16.item<double>(), loss32.item<double>(), 5e-3 * loss32.item<double>());
    double worst = 0.0;
    std::string worst_name;
    for (const auto& [name, g] : g32) {
      ASSERT_EQ(g16.at(name).scalar_type(), torch::kFloat) << name;
      const double err = ((g16.at(name) - g).norm() / g.norm().clamp_min(1e-12)).item<double>();
      if (err > worst) worst = err, worst_name = name;
    }
    // Gradients pass through every block's bf16 GEMMs twice: a few % relative at most.
    EXPECT_LT(worst, 0.05) << worst_name << " (" << to_string(attention) << ")";
    // The logits for sampling are fp32 too, and generation runs.
    torch::NoGradGuard no_grad;
    EXPECT_EQ(model.forward(idx).scalar_type(), torch::kFloat);
    EXPECT_EQ(generate(model, {1, 2, 3}, 5, 0.8, 10, 1).size(), 8u);
  }
}

TEST(GPT, Bf16TrainsAFixedBatchLikeFp32) {
  auto final_loss = [](Precision p) {
    torch::manual_seed(0);
    GPTConfig c = small_config();
    c.precision = p;
    auto model = std::make_shared<GPT>(c);
    AdamWOptions o;
    o.lr = 3e-3;
    auto opt = make_adamw(model->parameters(), o);
    const auto idx = torch::randint(97, {4, 32}, torch::kLong);
    const auto tgt = torch::randint(97, {4, 32}, torch::kLong);
    double loss = 0;
    for (int s = 0; s < 30; ++s) {
      opt->zero_grad();
      auto l = model->loss(idx, tgt);
      l.backward();
      opt->step();
      loss = l.item<double>();
    }
    return loss;
  };
  const double l32 = final_loss(Precision::FP32), l16 = final_loss(Precision::BF16);
  EXPECT_LT(l16, 0.5 * std::log(97.0));  // it learns
  EXPECT_NEAR(l16, l32, 0.05 * l32);
}

}  // namespace
}  // namespace ht
