// Activation recompute: gradients of inputs and parameters equal the plain run's, dropout replays
// the same masks, the RNG stream is untouched, and peak memory drops on a chain of blocks.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/recompute.h"

namespace {

// Residual MLP block: x + proj(dropout(gelu(fc(x)))).
struct MlpBlockImpl : torch::nn::Module {
  MlpBlockImpl(int64_t d, double dropout)
      : fc(register_module("fc", torch::nn::Linear(d, 4 * d))),
        proj(register_module("proj", torch::nn::Linear(4 * d, d))),
        drop(register_module("drop", torch::nn::Dropout(dropout))) {}
  at::Tensor forward(const at::Tensor& x) {
    return x + proj(drop(torch::gelu(fc(x), "tanh")));  // [N, d]
  }
  torch::nn::Linear fc, proj;
  torch::nn::Dropout drop;
};
TORCH_MODULE(MlpBlock);

struct Chain {
  Chain(int n, int64_t d, double dropout) {
    torch::manual_seed(7);
    for (int i = 0; i < n; ++i) blocks.emplace_back(d, dropout);
  }
  at::Tensor forward(at::Tensor x, bool use_recompute) {
    for (auto& b : blocks) {
      if (use_recompute)
        x = ht::recompute([b](const at::Tensor& t) mutable { return b->forward(t); }, x,
                          b->parameters());
      else
        x = b->forward(x);
    }
    return x;
  }
  std::vector<at::Tensor> grads() {
    std::vector<at::Tensor> g;
    for (auto& b : blocks)
      for (auto& p : b->parameters()) g.push_back(p.grad().clone());
    return g;
  }
  void zero_grad() {
    for (auto& b : blocks) b->zero_grad();
  }
  std::vector<MlpBlock> blocks;
};

// Runs forward + backward on the same input and returns (input grad, parameter grads).
std::pair<at::Tensor, std::vector<at::Tensor>> run(Chain& chain, bool use_recompute,
                                                   bool input_requires_grad) {
  torch::manual_seed(11);
  auto x = torch::randn({32, 16}).requires_grad_(input_requires_grad);
  auto target = torch::randn({32, 16});
  chain.zero_grad();
  torch::manual_seed(12);  // dropout masks
  auto loss = torch::mse_loss(chain.forward(x, use_recompute), target);
  loss.backward();
  return {input_requires_grad ? x.grad().clone() : at::Tensor(), chain.grads()};
}

void expect_same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 0.0, 1e-6))
        << "tensor " << i << " max err " << (a[i] - b[i]).abs().max().item<float>();
}

TEST(Recompute, InputAndParameterGradientsMatch) {
  Chain chain(4, 16, 0.0);
  auto [dx_plain, g_plain] = run(chain, false, true);
  auto [dx_re, g_re] = run(chain, true, true);
  EXPECT_TRUE(torch::allclose(dx_plain, dx_re, 0.0, 1e-6));
  expect_same(g_plain, g_re);
  EXPECT_GT(g_plain[0].abs().sum().item<float>(), 0.0f);
}

TEST(Recompute, ParametersGetGradientsWhenInputNeedsNone) {
  Chain chain(3, 16, 0.0);
  auto [unused1, g_plain] = run(chain, false, false);
  auto [unused2, g_re] = run(chain, true, false);
  expect_same(g_plain, g_re);
}

TEST(Recompute, DropoutReplaysTheSameMasks) {
  Chain chain(3, 16, 0.3);
  for (auto& b : chain.blocks) b->train();
  auto [dx_plain, g_plain] = run(chain, false, true);
  const float after_plain = torch::rand({1}).item<float>();
  auto [dx_re, g_re] = run(chain, true, true);
  const float after_re = torch::rand({1}).item<float>();
  EXPECT_TRUE(torch::allclose(dx_plain, dx_re, 0.0, 1e-6));
  expect_same(g_plain, g_re);
  // The re-run restored the generator it borrowed: the stream continues as without recompute.
  EXPECT_EQ(after_plain, after_re);
}

TEST(Recompute, WorksAroundFlashAttention) {
  torch::manual_seed(5);
  auto w = torch::randn({16, 48}, torch::requires_grad());  // qkv projection
  auto attn = [&w](const at::Tensor& x) {                   // x [B, T, 16]
    auto qkv = torch::matmul(x, w).view({2, 20, 3, 2, 8});  // [B, T, 3, nh, hs]
    auto q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2);
    auto v = qkv.select(2, 2).transpose(1, 2);
    return ht::flash_attention(q, k, v, true, 8, 8);
  };
  auto x = torch::randn({2, 20, 16}, torch::requires_grad());
  auto g_plain = torch::autograd::grad({attn(x).square().sum()}, {x, w});
  // Parameters used inside fn are not inputs of the recompute node: ask grad() for x only.
  auto g_re = torch::autograd::grad({ht::recompute(attn, x).square().sum()}, {x});
  EXPECT_TRUE(torch::allclose(g_plain[0], g_re[0], 0.0, 1e-6));
  w.mutable_grad() = at::Tensor();
  ht::recompute(attn, x).square().sum().backward();
  EXPECT_TRUE(torch::allclose(g_plain[1], w.grad(), 0.0, 1e-6));
}

TEST(Recompute, NoGraphWithoutGradMode) {
  Chain chain(2, 16, 0.0);
  auto x = torch::randn({4, 16}, torch::requires_grad());
  torch::NoGradGuard no_grad;
  auto y = chain.forward(x, true);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(torch::allclose(y, chain.forward(x, false)));
}

TEST(Recompute, GeluLinearMatchesPlain) {
  torch::manual_seed(6);
  torch::nn::Linear proj(64, 16);
  auto h = torch::randn({10, 64}, torch::requires_grad());
  auto g_plain =
      torch::autograd::grad({proj(torch::gelu(h, "tanh")).sum()}, {h, proj->weight, proj->bias});
  auto y = ht::recompute_gelu_linear(h, proj->weight, proj->bias);
  EXPECT_TRUE(torch::allclose(y, proj(torch::gelu(h, "tanh"))));
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(h.grad(), g_plain[0], 0.0, 1e-6));
  EXPECT_TRUE(torch::allclose(proj->weight.grad(), g_plain[1], 0.0, 1e-6));
  EXPECT_TRUE(torch::allclose(proj->bias.grad(), g_plain[2], 0.0, 1e-6));
}

TEST(Recompute, GeluLinearTakesATransposedWeight) {
  // GPT-2's Conv1D keeps its weight as [in, out]; passing weight.t() must still reach the leaf.
  torch::manual_seed(8);
  auto w = torch::randn({64, 16}, torch::requires_grad());  // [in, out]
  auto b = torch::randn({16}, torch::requires_grad());
  auto h = torch::randn({10, 64}, torch::requires_grad());
  auto g_plain = torch::autograd::grad({at::addmm(b, torch::gelu(h, "tanh"), w).square().sum()},
                                       {h, w, b});
  ht::recompute_gelu_linear(h, w.t(), b).square().sum().backward();
  EXPECT_TRUE(torch::allclose(h.grad(), g_plain[0], 0.0, 1e-5));
  EXPECT_TRUE(torch::allclose(w.grad(), g_plain[1], 0.0, 1e-5));
  EXPECT_TRUE(torch::allclose(b.grad(), g_plain[2], 0.0, 1e-5));
}

// Peak tensor bytes above the resting state for one forward + backward of the chain.
int64_t peak_bytes(Chain& chain, bool use_recompute) {
  auto x = torch::randn({512, 64}, torch::requires_grad());
  chain.zero_grad();
  const int64_t before = ht::allocator_stats().current_bytes;
  ht::reset_peak_bytes();
  chain.forward(x, use_recompute).square().mean().backward();
  return ht::allocator_stats().peak_bytes - before;
}

TEST(Recompute, LowersPeakMemoryOnAChainOfBlocks) {
  ASSERT_TRUE(ht::tracking_allocator_installed());
  Chain chain(8, 64, 0.0);
  peak_bytes(chain, false);  // allocate the .grad tensors first so both runs start equal
  const int64_t plain = peak_bytes(chain, false);
  const int64_t re = peak_bytes(chain, true);
  // Plain keeps ~9 activations of [512, 64] per block (fc out and GELU out are 4 wide); recompute
  // keeps one per block plus one block's worth during its backward.
  EXPECT_LT(re, plain / 2) << "plain " << plain << " B, recompute " << re << " B";
}

TEST(Recompute, LevelsAndPolicy) {
  for (auto level :
       {ht::RecomputeLevel::None, ht::RecomputeLevel::Selective, ht::RecomputeLevel::Full})
    EXPECT_EQ(ht::parse_recompute_level(ht::to_string(level)), level);
  EXPECT_EQ(ht::parse_recompute_level("2"), ht::RecomputeLevel::Full);
  EXPECT_THROW(ht::parse_recompute_level("some"), std::invalid_argument);

  ht::RecomputePolicy policy{ht::RecomputeLevel::Full, 2};
  EXPECT_TRUE(policy.recompute_block(0));
  EXPECT_FALSE(policy.recompute_block(1));
  EXPECT_FALSE(policy.recompute_gelu(0));
  EXPECT_FALSE(policy.recompute_gelu(1));
  EXPECT_TRUE((ht::RecomputePolicy{ht::RecomputeLevel::Selective, 1}.recompute_gelu(3)));
  EXPECT_THROW((ht::RecomputePolicy{ht::RecomputeLevel::Full, 0}.validate()),
               std::invalid_argument);
  ht::RecomputePolicy none;
  EXPECT_FALSE(none.recompute_block(0));
  EXPECT_FALSE(none.recompute_gelu(0));
}

}  // namespace
