// Generation tests: seeded sampling is reproducible, greedy decoding is the argmax, the context
// is cropped to block_size, and top-k never leaves the top k.
#include <gtest/gtest.h>
#include <algorithm>
#include <torch/torch.h>

#include "hybrid/models/generate.h"

namespace ht {
namespace {

GPTConfig config() {
  GPTConfig c = gpt_preset("tiny");
  c.n_layer = 2;
  c.n_embd = 32;
  c.block_size = 8;
  c.vocab_size = 50;
  return c;
}

TEST(Generate, SameSeedSameTokensOtherSeedOtherTokens) {
  torch::manual_seed(0);
  GPT model(config());
  const std::vector<int64_t> prompt = {1, 2, 3};
  const auto a = generate(model, prompt, 20, 1.0, 0, 7);
  const auto b = generate(model, prompt, 20, 1.0, 0, 7);
  const auto c = generate(model, prompt, 20, 1.0, 0, 8);
  ASSERT_EQ(a.size(), 23u);
  EXPECT_EQ(std::vector<int64_t>(a.begin(), a.begin() + 3), prompt);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(model.is_training());  // the mode is restored
}

TEST(Generate, GreedyIsArgmaxOverTheCroppedContext) {
  torch::manual_seed(0);
  GPT model(config());
  const std::vector<int64_t> prompt = {5, 4, 3, 2, 1, 0, 9, 8, 7, 6};  // longer than block_size
  const auto out = generate(model, prompt, 5, /*temperature=*/0.0, 0, 123);
  ASSERT_EQ(out.size(), 15u);
  torch::NoGradGuard no_grad;
  model.eval();
  for (size_t i = prompt.size(); i < out.size(); ++i) {
    std::vector<int64_t> ctx(out.begin() + (i - 8), out.begin() + i);
    const auto logits = model.forward(torch::tensor(ctx).view({1, 8}));  // [1, 8, V]
    EXPECT_EQ(out[i], logits[0][7].argmax().item<int64_t>()) << i;
  }
  EXPECT_EQ(out, generate(model, prompt, 5, 0.0, 0, 999));  // seed does not matter
}

TEST(Generate, TopKStaysInTheTopK) {
  torch::manual_seed(0);
  GPT model(config());
  const std::vector<int64_t> prompt = {3};
  torch::NoGradGuard no_grad;
  model.eval();
  const auto logits = model.forward(torch::tensor(prompt).view({1, 1}))[0][0];
  const auto top = std::get<1>(logits.topk(3));
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const auto out = generate(model, prompt, 1, 5.0, 3, seed);  // hot: would wander without k
    EXPECT_TRUE(top.eq(out[1]).any().item<bool>()) << out[1];
  }
}

TEST(Generate, SampleBelowKeepsEveryDrawnIdUnderIt) {
  // A byte-level run with a vocabulary larger than 256 samples bytes only.
  torch::manual_seed(0);
  GPT model(config());
  const auto hot = generate(model, {3}, 200, 5.0, 0, 1);  // without the limit ids reach 49
  EXPECT_GE(*std::max_element(hot.begin() + 1, hot.end()), 10) << "the test proves nothing";
  const auto limited = generate(model, {3}, 200, 5.0, 0, 1, /*sample_below=*/10);
  for (size_t i = 1; i < limited.size(); ++i) EXPECT_LT(limited[i], 10) << i;
  const auto greedy = generate(model, {3}, 20, 0.0, 0, 1, 10);
  for (size_t i = 1; i < greedy.size(); ++i) EXPECT_LT(greedy[i], 10) << i;
  const auto top_k = generate(model, {3}, 20, 1.0, 30, 1, 10);  // k above the limit: all 10
  for (size_t i = 1; i < top_k.size(); ++i) EXPECT_LT(top_k[i], 10) << i;
}

TEST(Generate, RejectsBadArguments) {
  GPT model(config());
  EXPECT_THROW(generate(model, {}, 3), std::invalid_argument);
  EXPECT_THROW(generate(model, {50}, 3), std::invalid_argument);
  EXPECT_THROW(generate(model, {1}, 3, -1.0), std::invalid_argument);
  EXPECT_THROW(generate(model, {1}, 3, 1.0, 0, 0, 51), std::invalid_argument);
  EXPECT_THROW(generate(model, {1}, 3, 1.0, 0, 0, -1), std::invalid_argument);
}

}  // namespace
}  // namespace ht
