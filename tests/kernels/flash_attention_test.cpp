// flash_attention against the naive softmax(QK^T)V reference: values, logsumexp and gradients
// over odd lengths, tile shapes and head sizes, plus the memory it saves.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/kernels/attention.h"

namespace {

struct Case {
  int64_t T, S, hs, block_q, block_k;
  bool causal;
};

std::string describe(const Case& c) {
  return "T" + std::to_string(c.T) + "_S" + std::to_string(c.S) + "_hs" + std::to_string(c.hs) +
         "_bq" + std::to_string(c.block_q) + "_bk" + std::to_string(c.block_k) +
         (c.causal ? "_causal" : "_full");
}

std::string case_name(const testing::TestParamInfo<Case>& info) { return describe(info.param); }

// Without this gtest prints the raw bytes of the struct (padding included) in ctest's listing.
void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

class FlashVsNaive : public testing::TestWithParam<Case> {};

TEST_P(FlashVsNaive, ValuesAndGradientsMatch) {
  const Case c = GetParam();
  torch::manual_seed(1);
  const int64_t B = 2, nh = 3;
  auto q = torch::randn({B, nh, c.T, c.hs}, torch::requires_grad());
  auto k = torch::randn({B, nh, c.S, c.hs}, torch::requires_grad());
  auto v = torch::randn({B, nh, c.S, c.hs}, torch::requires_grad());
  auto dy = torch::randn({B, nh, c.T, c.hs});

  auto y_ref = ht::naive_attention(q, k, v, c.causal);
  auto g_ref = torch::autograd::grad({y_ref}, {q, k, v}, {dy});
  auto y = ht::flash_attention(q, k, v, c.causal, c.block_q, c.block_k);
  auto g = torch::autograd::grad({y}, {q, k, v}, {dy});

  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-4, 1e-5)) << (y - y_ref).abs().max().item<float>();
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::allclose(g[i], g_ref[i], 1e-4, 1e-4))
        << names[i] << " max err " << (g[i] - g_ref[i]).abs().max().item<float>();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashVsNaive,
    testing::Values(Case{1, 1, 16, 64, 64, true}, Case{1, 1, 64, 64, 64, false},
                    Case{64, 64, 64, 64, 64, true}, Case{100, 100, 16, 64, 64, true},
                    Case{100, 100, 64, 64, 64, false}, Case{130, 130, 64, 32, 16, true},
                    Case{130, 130, 16, 16, 32, false}, Case{77, 77, 64, 128, 256, true},
                    Case{33, 50, 16, 8, 16, false}, Case{50, 33, 16, 16, 8, true},
                    Case{200, 200, 64, 128, 128, true}),
    case_name);

TEST(FlashAttention, LogsumexpMatchesScores) {
  torch::manual_seed(2);
  auto q = torch::randn({1, 2, 70, 16}), k = torch::randn({1, 2, 70, 16});
  auto v = torch::randn({1, 2, 70, 16});
  auto [y, lse] = ht::flash_attention_forward(q, k, v, /*causal=*/true, 32, 16);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / 4.0;  // 1/sqrt(16)
  scores = scores.masked_fill(torch::ones({70, 70}, torch::kBool).triu(1), -INFINITY);
  EXPECT_TRUE(torch::allclose(lse, torch::logsumexp(scores, -1), 1e-5, 1e-5));
}

TEST(FlashAttention, AcceptsNonContiguousHeads) {
  // The GPT layout: [B, T, nh, hs] transposed to [B, nh, T, hs] without a copy.
  torch::manual_seed(3);
  auto qkv = torch::randn({2, 40, 3, 4, 16}, torch::requires_grad());
  auto q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2);
  auto v = qkv.select(2, 2).transpose(1, 2);
  auto dy = torch::randn({2, 4, 40, 16});
  auto g_ref = torch::autograd::grad({ht::naive_attention(q, k, v, true)}, {qkv}, {dy})[0];
  auto g = torch::autograd::grad({ht::flash_attention(q, k, v, true, 16, 16)}, {qkv}, {dy})[0];
  EXPECT_TRUE(torch::allclose(g, g_ref, 1e-4, 1e-4));
}

TEST(FlashAttention, ReadsViewsWithStorageOffsets) {
  // q, k, v as slices of one contiguous [3, B, nh, T, hs] tensor: k and v start mid-storage.
  torch::manual_seed(4);
  auto qkv = torch::randn({3, 1, 2, 30, 16}, torch::requires_grad());
  auto dy = torch::randn({1, 2, 30, 16});
  auto g_ref =
      torch::autograd::grad({ht::naive_attention(qkv[0], qkv[1], qkv[2], false)}, {qkv}, {dy})[0];
  auto y = ht::flash_attention(qkv[0], qkv[1], qkv[2], false, 8, 8);
  EXPECT_TRUE(torch::allclose(y, ht::naive_attention(qkv[0], qkv[1], qkv[2], false), 1e-4, 1e-5));
  auto g = torch::autograd::grad({y}, {qkv}, {dy})[0];
  EXPECT_TRUE(torch::allclose(g, g_ref, 1e-4, 1e-4));
}

TEST(FlashAttention, OutputTransposesToTokensWithoutACopy) {
  auto q = torch::randn({2, 3, 10, 8});
  auto y = ht::flash_attention(q, q, q, true);  // [B, nh, T, hs] view of [B, T, nh, hs] storage
  EXPECT_TRUE(y.transpose(1, 2).is_contiguous());
}

TEST(FlashAttention, RejectsBadInputs) {
  auto x = torch::randn({1, 2, 8, 16});
  // Other dtypes take the fallback (dispatch_test.cpp); the raw kernels refuse them.
  EXPECT_THROW(ht::flash_attention_forward(x.to(torch::kDouble), x, x, true, 64, 64), std::invalid_argument);
  EXPECT_THROW(ht::flash_attention(x, x.narrow(3, 0, 8), x, true), std::invalid_argument);
  EXPECT_THROW(ht::flash_attention(x[0], x[0], x[0], true), std::invalid_argument);
  EXPECT_THROW(ht::flash_attention(x, x, x, true, 0, 64), std::invalid_argument);
}

TEST(FlashAttention, KindsRoundTripAndAgree) {
  for (auto kind : {ht::AttentionKind::Naive, ht::AttentionKind::Flash, ht::AttentionKind::Fused})
    EXPECT_EQ(ht::parse_attention_kind(ht::to_string(kind)), kind);
  EXPECT_THROW(ht::parse_attention_kind("fast"), std::invalid_argument);
  auto x = torch::randn({1, 1, 5, 8});
  EXPECT_TRUE(torch::allclose(ht::attention(x, x, x, true, ht::AttentionKind::Flash),
                              ht::attention(x, x, x, true, ht::AttentionKind::Naive), 1e-5,
                              1e-6));
  if (!ht::fused_attention_available())
    EXPECT_THROW(ht::attention(x, x, x, true, ht::AttentionKind::Fused), std::invalid_argument);
}

// Peak tensor bytes of forward + backward, measured by the tracking allocator.
template <typename Attn>
int64_t peak_bytes_of_step(Attn attn, int64_t T) {
  torch::manual_seed(4);
  auto q = torch::randn({1, 2, T, 16}, torch::requires_grad());
  auto k = torch::randn({1, 2, T, 16}, torch::requires_grad());
  auto v = torch::randn({1, 2, T, 16}, torch::requires_grad());
  const int64_t before = ht::allocator_stats().current_bytes;
  ht::reset_peak_bytes();
  attn(q, k, v).sum().backward();
  return ht::allocator_stats().peak_bytes - before;
}

TEST(FlashAttention, PeakMemoryIsLinearInT) {
  ASSERT_TRUE(ht::tracking_allocator_installed());
  auto flash = [](auto& q, auto& k, auto& v) { return ht::flash_attention(q, k, v, true); };
  auto naive = [](auto& q, auto& k, auto& v) { return ht::naive_attention(q, k, v, true); };
  const int64_t flash_1k = peak_bytes_of_step(flash, 1024);
  const int64_t flash_2k = peak_bytes_of_step(flash, 2048);
  const int64_t naive_1k = peak_bytes_of_step(naive, 1024);
  const int64_t naive_2k = peak_bytes_of_step(naive, 2048);
  // One [2, T, T] fp32 matrix is 8 MiB at T = 1024; flash never holds one.
  EXPECT_LT(flash_1k, naive_1k / 8);
  EXPECT_LT(flash_2k, int64_t(2.5 * flash_1k));  // linear: doubling T about doubles the bytes
  EXPECT_GT(naive_2k, int64_t(3.5 * naive_1k));  // quadratic
}

}  // namespace
