// Attention core tests: the hand-written forward and backward of "naive" against the same maths
// composed from autograd-tracked ATen ops, with and without dropout.
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/kernels/attention_core.h"

namespace ht {
namespace {

// softmax(q k^T / sqrt(hs) + causal mask) v, with autograd doing the backward.
at::Tensor composite_attention(const at::Tensor& qkv, int64_t n_head, const at::Tensor& keep) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
  const auto parts = qkv.view({B, T, 3, n_head, hs}).permute({2, 0, 3, 1, 4});
  auto att = torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(double(hs));
  att = att.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY).softmax(-1);
  if (keep.defined()) att = att * keep;
  return torch::matmul(att, parts[2]).transpose(1, 2).reshape({B, T, C});
}

TEST(Attention, NaiveMatchesCompositeForwardAndBackward) {
  torch::manual_seed(0);
  const auto core = make_attention_core(AttentionKind::Naive, 40);
  const int64_t n_head = 3;
  const auto qkv = torch::randn({2, 33, 3 * 24}, torch::requires_grad());
  const auto dy = torch::randn({2, 33, 24});

  const auto y = core(qkv, n_head, 0.0);
  ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{2, 33, 24}));
  EXPECT_TRUE(y.is_contiguous());
  const auto g = torch::autograd::grad({y}, {qkv}, {dy})[0];

  const auto y_ref = composite_attention(qkv, n_head, at::Tensor());
  const auto g_ref = torch::autograd::grad({y_ref}, {qkv}, {dy})[0];
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(g, g_ref, 1e-4, 1e-6))
      << (g - g_ref).abs().max().item<double>();

  // The first position sees only itself: its output is its own v.
  EXPECT_TRUE(torch::allclose(y.select(1, 0), qkv.select(1, 0).narrow(1, 48, 24), 1e-6, 1e-6));
}

TEST(Attention, DropoutMatchesCompositeWithTheSameMask) {
  const auto core = make_attention_core(AttentionKind::Naive, 16);
  const int64_t n_head = 2, B = 2, T = 16, C = 8;
  torch::manual_seed(0);
  const auto qkv = torch::randn({B, T, 3 * C}, torch::requires_grad());
  const auto dy = torch::randn({B, T, C});
  const double p = 0.25;

  torch::manual_seed(42);
  const auto y = core(qkv, n_head, p);
  const auto g = torch::autograd::grad({y}, {qkv}, {dy})[0];
  // The core draws its multipliers first thing with the global generator: redraw them.
  torch::manual_seed(42);
  const auto keep = torch::empty({B, n_head, T, T}).bernoulli_(1.0 - p).div_(1.0 - p);
  const auto y_ref = composite_attention(qkv, n_head, keep);
  const auto g_ref = torch::autograd::grad({y_ref}, {qkv}, {dy})[0];
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(g, g_ref, 1e-4, 1e-6));
  EXPECT_FALSE(torch::allclose(y, core(qkv, n_head, 0.0), 1e-3, 1e-3));
}

TEST(Attention, RejectsTooLongSequencesAndUnknownNames) {
  const auto core = make_attention_core(AttentionKind::Naive, 8);
  EXPECT_THROW(core(torch::randn({1, 9, 12}), 2, 0.0), c10::Error);
  EXPECT_THROW(parse_attention_kind("flash2"), std::invalid_argument);
}

}  // namespace
}  // namespace ht
