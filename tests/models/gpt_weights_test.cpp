// GPT-2 checkpoint tests: save/load round trips exactly, HF-style files (prefix, mask buffers,
// tied lm_head) load, and wrong files fail with the offending tensor's name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_weights.h"
#include "hybrid/core/safetensors.h"
#include "support/scratch_dir.h"

namespace ht {
namespace {

using ::testing::HasSubstr;

GPTConfig config() {
  GPTConfig c = gpt_preset("tiny");
  c.n_layer = 2;
  c.n_embd = 32;
  c.block_size = 16;
  return c;
}

std::string load_error(GPT& model, const std::string& path) {
  try {
    load_gpt2_weights(model, path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "no error";
}

TEST(GPTWeights, SaveThenLoadGivesIdenticalLogits) {
  testing::ScratchDir dir;
  torch::manual_seed(1);
  GPT a(config());
  torch::manual_seed(2);
  GPT b(config());
  const auto idx = torch::randint(256, {2, 16}, torch::kLong);
  torch::NoGradGuard no_grad;
  ASSERT_FALSE(torch::equal(a.forward(idx), b.forward(idx)));
  const auto path = dir.file("gpt.safetensors");
  save_gpt2_weights(a, path);
  load_gpt2_weights(b, path);
  EXPECT_TRUE(torch::equal(a.forward(idx), b.forward(idx)));
  // Parameters were updated in place: the same storage, no new tensors.
  EXPECT_EQ(b.named_parameters()["wte.weight"].data_ptr(), b.token_embedding().data_ptr());
  const auto file = load_safetensors(path);
  EXPECT_EQ(file.size(), a.named_parameters().size());
  EXPECT_EQ(file.count("wte.weight"), 1u);
}

TEST(GPTWeights, LoadsHuggingFaceStyleNames) {
  testing::ScratchDir dir;
  torch::manual_seed(1);
  GPT a(config());
  NamedTensors hf;
  for (const auto& p : a.named_parameters()) {
    hf.emplace_back("transformer." + p.key(), p.value().detach().to(torch::kHalf));
  }
  hf.emplace_back("transformer.h.0.attn.bias", torch::ones({1, 1, 16, 16}).tril());
  hf.emplace_back("transformer.h.1.attn.masked_bias", torch::tensor(-1e4f));
  hf.emplace_back("lm_head.weight", a.token_embedding().detach().to(torch::kHalf));
  const auto path = dir.file("hf.safetensors");
  save_safetensors(path, hf, {{"format", "pt"}});

  torch::manual_seed(2);
  GPT b(config());
  load_gpt2_weights(b, path);
  torch::NoGradGuard no_grad;
  for (const auto& p : a.named_parameters()) {
    EXPECT_TRUE(torch::equal(b.named_parameters()[p.key()],
                             p.value().to(torch::kHalf).to(torch::kFloat)))
        << p.key();
  }
}

TEST(GPTWeights, WrongShapesFailNamingTheTensorAndLeaveTheModelAlone) {
  testing::ScratchDir dir;
  torch::manual_seed(1);
  GPTConfig bigger = config();
  bigger.n_embd = 64;
  const auto path = dir.file("big.safetensors");
  save_gpt2_weights(GPT(bigger), path);

  GPT model(config());
  const auto before = model.token_embedding().clone();
  const auto msg = load_error(model, path);
  EXPECT_THAT(msg, HasSubstr("h.0.mlp.c_fc.weight: file has [64, 256], model expects [32, 128]"));
  EXPECT_THAT(msg, HasSubstr("shape mismatches (28)"));
  EXPECT_THAT(msg, HasSubstr("is the config the right preset?"));
  EXPECT_THAT(msg, HasSubstr("n_embd 64"));
  EXPECT_TRUE(torch::equal(model.token_embedding(), before));
}

TEST(GPTWeights, MissingUnexpectedAndUntiedKeysAreReported) {
  testing::ScratchDir dir;
  GPT model(config());
  NamedTensors tensors;
  for (const auto& p : model.named_parameters()) {
    if (p.key() != "ln_f.bias") tensors.emplace_back(p.key(), p.value().detach());
  }
  tensors.emplace_back("h.7.ln_1.weight", torch::ones({32}));
  tensors.emplace_back("lm_head.weight", torch::zeros({256, 32}));
  const auto path = dir.file("odd.safetensors");
  save_safetensors(path, tensors);
  const auto msg = load_error(model, path);
  EXPECT_THAT(msg, HasSubstr("missing from the file (1):\n    ln_f.bias"));
  EXPECT_THAT(msg, HasSubstr("unexpected in the file (1):\n    h.7.ln_1.weight"));
  EXPECT_THAT(msg, HasSubstr("lm_head.weight differs from wte.weight"));
}

}  // namespace
}  // namespace ht
