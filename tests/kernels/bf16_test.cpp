// bf16 kernels against fp32 references within bf16 tolerance: GEMM, the linear layer, GELU,
// LayerNorm, both attention kernels and the fused LM head, forward and backward.
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/attention_core.h"
#include "hybrid/kernels/lm_head_loss.h"
#include "hybrid/kernels/precision.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layer_norm.h"
#include "kernels/linear.h"

namespace ht {
namespace {

// Tolerances. bf16 keeps 8 significant bits: one rounding is a relative error <= 2^-9 (0.2 %).
// An fp32-accumulated GEMM of bf16-rounded operands sees ~2^-9 per operand, averaging out over
// K terms: the relative (Frobenius) error of a product against fp32 operands stays ~0.3 %, and a
// chain of such steps (attention, a backward pass) a few of those.
constexpr double kOneRounding = 1.0 / 256;  // 2^-8: one bf16 ulp relative, at most
constexpr double kProduct = 1e-2;           // a GEMM, or an op after one, against fp32 inputs
constexpr double kChain = 3e-2;             // several bf16 steps in a row (backward passes)

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const auto g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  return ((g - w).norm() / w.norm()).item<double>();
}

at::Tensor bf16(const at::Tensor& x) { return x.to(torch::kBFloat16); }
at::Tensor rounded(const at::Tensor& x) { return x.to(torch::kBFloat16).to(torch::kFloat); }

TEST(Bf16Gemm, Fp32OutputEqualsFp32ProductOfTheRoundedOperands) {
  if (!onednn_bf16_gemm_available()) GTEST_SKIP() << "no oneDNN bf16 GEMM loaded";
  torch::manual_seed(0);
  const int64_t M = 37, K = 301, N = 29;
  const auto a = torch::randn({M, K}), b = torch::randn({K, N});
  const auto a_t = torch::randn({K, M}).t(), b_t = torch::randn({N, K}).t();
  for (const auto& [x, y] : std::vector<std::pair<at::Tensor, at::Tensor>>{{a, b}, {a_t, b}, {a, b_t}, {a_t, b_t}}) {
    auto out = torch::randn({M, N});
    const auto ref = torch::addmm(out, rounded(x), rounded(y), 0.5, 2.0);  // exact products in fp32
    matmul_into(out, bf16(x), bf16(y), 2.0f, 0.5f);
    EXPECT_EQ(out.scalar_type(), torch::kFloat);
    // Products of bf16 values are exact in fp32: only the summation order differs.
    EXPECT_TRUE(torch::allclose(out, ref, 1e-5, 1e-4)) << (out - ref).abs().max().item<float>();
  }
  // Against the unrounded fp32 product: within bf16 tolerance.
  const auto c = matmul2d_f32(bf16(a), bf16(b));
  EXPECT_LT(rel_err(c, torch::mm(a, b)), kProduct);
}

// alpha != 1 takes its own route where oneDNN uses AMX (alpha = 1, then a scaling pass): the
// BLAS rules still hold there - beta = 0 ignores C (NaN included), alpha = 0 does not read A, B.
TEST(Bf16Gemm, AlphaAndBetaFollowBlasOnEveryRoute) {
  if (!onednn_bf16_gemm_available()) GTEST_SKIP() << "no oneDNN bf16 GEMM loaded";
  torch::manual_seed(2);
  const auto a = bf16(torch::randn({33, 130})), b = bf16(torch::randn({130, 47}));
  const auto product = matmul2d_f32(a, b);  // [33, 47]
  auto out = torch::full({33, 47}, std::nanf(""));
  matmul_into(out, a, b, 0.125f, 0.0f);
  EXPECT_TRUE(torch::allclose(out, product * 0.125, 1e-5, 1e-5));
  const auto c = torch::randn({33, 47});
  out = c.clone();
  matmul_into(out, a, b, 0.0f, 3.0f);
  EXPECT_TRUE(torch::allclose(out, c * 3.0, 1e-6, 1e-6));
  auto wide = torch::randn({33, 60});
  const auto wide_before = wide.clone();
  auto view = wide.narrow(1, 5, 47);  // a strided C
  matmul_into(view, a, b, 0.3f, 1.0f);
  EXPECT_TRUE(torch::allclose(view, wide_before.narrow(1, 5, 47) + product * 0.3, 1e-5, 1e-4));
  EXPECT_TRUE(torch::equal(wide.narrow(1, 0, 5), wide_before.narrow(1, 0, 5)));  // untouched
  EXPECT_TRUE(torch::equal(wide.narrow(1, 52, 8), wide_before.narrow(1, 52, 8)));
}

TEST(Bf16Gemm, Bf16OutputIsTheFp32ResultRoundedOnce) {
  torch::manual_seed(1);
  const auto a = bf16(torch::randn({20, 64})), b = bf16(torch::randn({64, 24}));
  auto out = torch::empty({20, 24}, torch::kBFloat16);
  matmul_into(out, a, b);
  const auto f32 = matmul2d_f32(a, b);
  EXPECT_TRUE(torch::equal(out, f32.to(torch::kBFloat16)));
  EXPECT_EQ(matmul2d(a, b).scalar_type(), torch::kBFloat16);
}

TEST(Bf16Linear, ForwardAndGradientsWithinBf16ToleranceOfFp32) {
  torch::manual_seed(2);
  const auto x = torch::randn({4, 16, 96}, torch::requires_grad());
  const auto w = (torch::randn({96, 160}) * 0.1).requires_grad_();
  const auto b = torch::randn({160}, torch::requires_grad());
  const auto dy = torch::randn({4, 16, 160});
  const auto y32 = linear_in_out(x, w, b);
  const auto g32 = torch::autograd::grad({y32}, {x, w, b}, {dy});
  const auto xb = bf16(x.detach()).requires_grad_();
  const auto y = linear_in_out(xb, w, b);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto g = torch::autograd::grad({y}, {xb, w, b}, {bf16(dy)});
  EXPECT_EQ(g[0].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(g[1].scalar_type(), torch::kFloat);  // fp32 masters get fp32 gradients
  EXPECT_EQ(g[2].scalar_type(), torch::kFloat);
  EXPECT_LT(rel_err(y, y32), kProduct);
  for (int i = 0; i < 3; ++i) EXPECT_LT(rel_err(g[i], g32[i]), kProduct) << i;
}

TEST(Bf16Gelu, WithinOneRoundingOfFp32ForwardAndBackward) {
  torch::manual_seed(3);
  const auto x = bf16(torch::randn({50000}) * 3).requires_grad_();
  const auto x32 = x.detach().to(torch::kFloat).requires_grad_();
  const auto dy = bf16(torch::randn({50000}));
  const auto y = gelu_tanh(x);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto y_ref = at::gelu(x32, "tanh");
  // The kernel computes in fp32 and rounds once: at most one bf16 ulp from the rounded reference.
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), y_ref, kOneRounding, 1e-6));
  const auto g = torch::autograd::grad({y}, {x}, {dy})[0];
  const auto g_ref = torch::autograd::grad({y_ref}, {x32}, {dy.to(torch::kFloat)})[0];
  EXPECT_TRUE(torch::allclose(g.to(torch::kFloat), g_ref, kOneRounding, 1e-5));
}

TEST(Bf16LayerNorm, Fp32StatisticsBf16OutputAndGradients) {
  torch::manual_seed(4);
  const auto x = (torch::randn({8, 64}) * 2 + 0.5).requires_grad_();
  const auto w = torch::randn({64}, torch::requires_grad()), b = torch::randn({64}, torch::requires_grad());
  const auto y = layer_norm_to(x, w, b, 1e-5, torch::kBFloat16);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto y32 = at::layer_norm(x, {64}, w, b, 1e-5);
  EXPECT_TRUE(torch::equal(y, y32.to(torch::kBFloat16)));  // fp32 maths, one rounding
  const auto dy = bf16(torch::randn({8, 64}));
  const auto g = torch::autograd::grad({y}, {x, w, b}, {dy});
  const auto g32 = torch::autograd::grad({y32}, {x, w, b}, {dy.to(torch::kFloat)});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g[i].scalar_type(), torch::kFloat) << i;
    EXPECT_LT(rel_err(g[i], g32[i]), kProduct) << i;  // x kept in bf16 for backward
  }
}

// The naive core and flash attention in bf16 against the fp32 naive core on the same inputs.
TEST(Bf16Attention, NaiveAndFlashWithinBf16ToleranceOfFp32) {
  torch::manual_seed(5);
  const int64_t B = 2, T = 70, nh = 3, hs = 16, C = nh * hs;
  const auto qkv32 = torch::randn({B, T, 3 * C}, torch::requires_grad());
  const auto dy = torch::randn({B, T, C});
  const auto naive = make_attention_core(AttentionKind::Naive, 128);
  const auto flash = make_attention_core(AttentionKind::Flash, 128);
  const auto y32 = naive(qkv32, nh, 0.0);
  const auto g32 = torch::autograd::grad({y32}, {qkv32}, {dy})[0];
  for (const auto& [name, core] : std::vector<std::pair<std::string, AttentionCore>>{{"naive", naive}, {"flash", flash}}) {
    const auto qkv = bf16(qkv32.detach()).requires_grad_();
    const auto y = core(qkv, nh, 0.0);
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16) << name;
    const auto g = torch::autograd::grad({y}, {qkv}, {bf16(dy)})[0];
    ASSERT_EQ(g.scalar_type(), torch::kBFloat16) << name;
    EXPECT_LT(rel_err(y, y32), kProduct) << name;
    EXPECT_LT(rel_err(g, g32), kChain) << name;
  }
}

TEST(Bf16Attention, FlashTilesMatchNaiveOverOddShapes) {
  torch::manual_seed(6);
  for (const auto& [T, bq, bk] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 64, 64}, {33, 16, 8}, {130, 32, 64}}) {
    const auto q = torch::randn({1, 2, T, 16}), k = torch::randn({1, 2, T, 16}), v = torch::randn({1, 2, T, 16});
    const auto ref = naive_attention(q, k, v, true);
    auto [y, lse] = flash_attention_forward(bf16(q), bf16(k), bf16(v), true, bq, bk);
    EXPECT_EQ(lse.scalar_type(), torch::kFloat);
    EXPECT_LT(rel_err(y, ref), kProduct) << T;
  }
}

TEST(Bf16LmHead, LossAndGradientsWithinBf16ToleranceOfFp32) {
  torch::manual_seed(7);
  const int64_t N = 48, C = 64, V = 300;
  const auto h32 = torch::randn({N, C}, torch::requires_grad());
  const auto wte = (torch::randn({V, C}) * 0.2).requires_grad_();
  const auto t = torch::randint(V, {N}, torch::kLong);
  const auto loss32 = lm_head_cross_entropy(h32, wte, t);
  const auto g32 = torch::autograd::grad({loss32}, {h32, wte});
  const auto h = bf16(h32.detach()).requires_grad_();
  const auto loss = lm_head_cross_entropy(h, wte, t);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);  // the loss is never rounded to bf16
  EXPECT_NEAR(loss.item<double>(), loss32.item<double>(), kOneRounding * loss32.item<double>());
  const auto g = torch::autograd::grad({loss}, {h, wte});
  EXPECT_EQ(g[0].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(g[1].scalar_type(), torch::kFloat);
  EXPECT_LT(rel_err(g[0], g32[0]), kProduct);
  EXPECT_LT(rel_err(g[1], g32[1]), kProduct);
  // Without grad (evaluation) the same loss.
  torch::NoGradGuard no_grad;
  EXPECT_EQ(lm_head_cross_entropy(h, wte, t).item<float>(), loss.item<float>());
}

TEST(Bf16Features, DetectionAgreesWithProcCpuinfo) {
  const CpuBf16Features& f = cpu_bf16_features();
  std::FILE* in = std::fopen("/proc/cpuinfo", "r");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, in)) > 0) text.append(buf, n);
  std::fclose(in);
  EXPECT_EQ(f.avx512_bf16, text.find(" avx512_bf16") != std::string::npos) << f.describe();
  EXPECT_EQ(f.amx_bf16, text.find(" amx_bf16") != std::string::npos) << f.describe();
  EXPECT_FALSE(f.model.empty());
  EXPECT_EQ(parse_precision("bf16"), Precision::BF16);
  EXPECT_EQ(to_string(Precision::FP32), "fp32");
  EXPECT_THROW(parse_precision("fp16"), std::invalid_argument);
}

}  // namespace
}  // namespace ht
