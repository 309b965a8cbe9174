// Kernel dispatch: each op's table picks the CPU kernel for float32 and bfloat16 CPU tensors and
// the ATen fallback for anything else (another device, double, a layout the kernel cannot read).
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/kernels/adamw8bit.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/attention_core.h"
#include "hybrid/kernels/lm_head_loss.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/kernels/precision.h"
#include "hybrid/kernels/quantize8.h"
#include "kernels/dispatch.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layer_norm.h"
#include "kernels/linear.h"

namespace ht {
namespace {

TEST(Dispatch, PathFollowsDeviceDtypeAndLayout) {
  EXPECT_EQ(kernel_path(torch::zeros({2})), KernelPath::CpuF32);
  EXPECT_EQ(kernel_path(torch::zeros({2}, torch::kBFloat16)), KernelPath::CpuBF16);
  EXPECT_EQ(kernel_path(torch::zeros({2}, torch::kDouble)), KernelPath::Fallback);
  EXPECT_EQ(kernel_path(torch::zeros({2}, torch::kHalf)), KernelPath::Fallback);
  EXPECT_EQ(kernel_path(torch::zeros({2}), /*layout_ok=*/false), KernelPath::Fallback);
  // A tensor on another device (the meta device stands in for CUDA here: no data, any shape).
  EXPECT_EQ(kernel_path(torch::empty({2}, torch::Device(torch::kMeta))), KernelPath::Fallback);
  EXPECT_EQ(kernel_path(torch::Device(torch::kCPU), torch::kBFloat16), KernelPath::CpuBF16);
}

int calls_f32 = 0, calls_fallback = 0;
int f32_entry(int x) { ++calls_f32; return x + 1; }
int fallback_entry(int x) { ++calls_fallback; return x + 2; }

TEST(Dispatch, TableWithoutBf16KernelTakesItsFallbackAndSaysSoOnce) {
  take_kernel_notes();
  const KernelTable<int (*)(int)> table{"test_op", f32_entry, nullptr, fallback_entry,
                                        "no bf16 kernel; ran the fallback"};
  EXPECT_EQ(table(KernelPath::CpuF32, 1), 2);
  EXPECT_EQ(table(KernelPath::Fallback, 1), 3);
  EXPECT_EQ(table(KernelPath::CpuBF16, 1), 3);
  EXPECT_EQ(table(KernelPath::CpuBF16, 1), 3);
  EXPECT_EQ(calls_f32, 1);
  EXPECT_EQ(calls_fallback, 3);
  const auto notes = take_kernel_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "test_op: no bf16 kernel; ran the fallback");
  EXPECT_TRUE(take_kernel_notes().empty());
}

TEST(Dispatch, GeluFallbackForDoubleAndNonContiguousMatchesATen) {
  torch::manual_seed(0);
  const auto d = torch::randn({4, 6}, torch::kDouble).t();
  EXPECT_TRUE(torch::allclose(gelu_tanh(d), at::gelu(d, "tanh")));
  const auto f = torch::randn({6, 5}).t();  // non-contiguous float32: ATen's, exactly
  EXPECT_TRUE(torch::equal(gelu_tanh(f), at::gelu(f, "tanh")));
}

TEST(Dispatch, GemmFallbackForDoubleAndUnreadableLayoutsMatchesAddmm) {
  torch::manual_seed(0);
  const auto a = torch::randn({5, 7}, torch::kDouble), b = torch::randn({7, 3}, torch::kDouble);
  auto out = torch::randn({5, 3}, torch::kDouble);
  const auto ref = torch::addmm(out, a, b, 0.5, 2.0);
  matmul_into(out, a, b, 2.0f, 0.5f);
  EXPECT_TRUE(torch::allclose(out, ref));
  // out with column stride 2: BLAS cannot write it; ATen can.
  const auto af = a.to(torch::kFloat), bf = b.to(torch::kFloat);
  auto wide = torch::zeros({5, 6});
  auto strided = wide.slice(1, 0, 6, 2);  // [5, 3], stride (6, 2)
  matmul_into(strided, af, bf);
  EXPECT_TRUE(torch::allclose(strided, torch::mm(af, bf), 1e-5, 1e-5));
}

TEST(Dispatch, LinearFallbackForDoubleMatchesAddmmWithGradients) {
  torch::manual_seed(0);
  const auto x = torch::randn({3, 4, 8}, torch::dtype(torch::kDouble).requires_grad(true));
  const auto w = torch::randn({8, 5}, torch::dtype(torch::kDouble).requires_grad(true));
  const auto b = torch::randn({5}, torch::dtype(torch::kDouble).requires_grad(true));
  const auto y = linear_in_out(x, w, b);
  const auto y_ref = torch::addmm(b, x.view({12, 8}), w).view({3, 4, 5});
  EXPECT_TRUE(torch::allclose(y, y_ref));
  const auto dy = torch::randn_like(y);
  const auto g = torch::autograd::grad({y}, {x, w, b}, {dy});
  const auto g_ref = torch::autograd::grad({y_ref}, {x, w, b}, {dy});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(g[i], g_ref[i])) << i;
}

TEST(Dispatch, AttentionFallbacksForDoubleMatchTheReference) {
  torch::manual_seed(0);
  auto q = torch::randn({1, 2, 9, 8}, torch::kDouble), k = torch::randn({1, 2, 9, 8}, torch::kDouble);
  auto v = torch::randn({1, 2, 9, 8}, torch::kDouble);
  EXPECT_TRUE(torch::allclose(flash_attention(q, k, v, true), naive_attention(q, k, v, true)));
  // The naive core on a double qkv: ATen's ops, the same maths as the float kernel.
  const auto core = make_attention_core(AttentionKind::Naive, 16);
  const auto qkv = torch::randn({2, 9, 3 * 8}, torch::kDouble);
  const auto y = core(qkv, 2, 0.0);
  EXPECT_EQ(y.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::allclose(y.to(torch::kFloat), core(qkv.to(torch::kFloat), 2, 0.0), 1e-5, 1e-6));
}

TEST(Dispatch, LmHeadFallbackForDoubleMatchesCrossEntropy) {
  torch::manual_seed(0);
  const auto h = torch::randn({6, 8}, torch::kDouble), wte = torch::randn({11, 8}, torch::kDouble);
  const auto t = torch::randint(11, {6}, torch::kLong);
  const auto loss = lm_head_cross_entropy(h, wte, t);
  EXPECT_NEAR(loss.item<double>(), torch::cross_entropy_loss(h.matmul(wte.t()), t).item<double>(), 1e-12);
  EXPECT_NEAR(loss.item<double>(), lm_head_cross_entropy(h.to(torch::kFloat), wte.to(torch::kFloat), t).item<double>(),
              1e-5);
}

TEST(Dispatch, LayerNormToFp32IsATenLayerNorm) {
  torch::manual_seed(0);
  const auto x = torch::randn({3, 16}), w = torch::randn({16}), b = torch::randn({16});
  EXPECT_TRUE(torch::equal(layer_norm_to(x, w, b, 1e-5, torch::kFloat), at::layer_norm(x, {16}, w, b, 1e-5)));
}

TEST(Dispatch, AdamWFallbackForDoubleMatchesTheFusedKernel) {
  torch::manual_seed(0);
  auto pf = torch::randn({40, 30}).requires_grad_();
  auto pd = pf.detach().to(torch::kDouble).requires_grad_();
  AdamWOptions o;
  o.lr = 1e-2;
  auto of = make_adamw({pf}, o), od = make_adamw({pd}, o);
  for (int s = 0; s < 5; ++s) {
    const auto g = torch::sin(pf.detach() * (s + 1));
    pf.mutable_grad() = g;
    pd.mutable_grad() = g.to(torch::kDouble);
    of->step();
    od->step();
  }
  EXPECT_TRUE(torch::allclose(pd.detach().to(torch::kFloat), pf.detach(), 1e-5, 1e-6));
}

TEST(Dispatch, AdamW8bitFallbackForANonContiguousGradientMatchesTheKernel) {
  // The CPU kernel reads contiguous gradients; a transposed one takes the ATen step, which keeps
  // the same code and the same counter-based stochastic rounding.
  torch::manual_seed(0);
  auto pa = torch::randn({64, 128}).requires_grad_();
  auto pb = pa.detach().clone().requires_grad_();
  AdamWOptions o;
  o.lr = 1e-2;
  auto oa = make_adamw8bit({pa}, o), ob = make_adamw8bit({pb}, o);
  for (int s = 0; s < 4; ++s) {
    const auto g = torch::randn({128, 64}).t();  // [64, 128], non-contiguous
    pa.mutable_grad() = g.contiguous();
    pb.mutable_grad() = g;
    oa->step();
    ob->step();
  }
  EXPECT_TRUE(torch::allclose(pa.detach(), pb.detach(), 1e-5, 1e-6))
      << (pa - pb).abs().max().item<float>();
  // Moments: the same codes but where float rounding of the update differs by an ulp.
  const double m_err = ((oa->first_moment(0) - ob->first_moment(0)).abs().max() /
                        oa->first_moment(0).abs().max()).item<double>();
  EXPECT_LT(m_err, 0.02);
}

TEST(Dispatch, QuantizeFallbackGivesTheKernelsCodes) {
  torch::manual_seed(0);
  const auto x = torch::randn({1000}) * 3;
  const DynamicCode& code = DynamicCode::signed_code();
  const auto ref = quantize_blockwise(x, code, 64);
  const auto d = quantize_blockwise(x.to(torch::kDouble), code, 64);  // fallback: ATen's ops
  EXPECT_TRUE(torch::equal(d.codes, ref.codes));
  EXPECT_TRUE(torch::equal(d.absmax, ref.absmax));
  EXPECT_TRUE(torch::equal(dequantize_blockwise(d, code), dequantize_blockwise(ref, code)));
  // bf16 has no kernel of its own: ATen's ops on its fp32 values, said once.
  take_kernel_notes();
  const auto xb = x.to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(quantize_blockwise(xb, code, 64).codes, quantize_blockwise(xb.to(torch::kFloat), code, 64).codes));
  const auto notes = take_kernel_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("quantize_blockwise"), std::string::npos);
}

TEST(Dispatch, FusedAttentionNeedsLibTorch2) {
  if (fused_attention_available()) {
    const auto qkv = torch::randn({1, 5, 24});
    EXPECT_TRUE(torch::allclose(make_attention_core(AttentionKind::Fused, 8)(qkv, 2, 0.0),
                                make_attention_core(AttentionKind::Naive, 8)(qkv, 2, 0.0), 1e-5, 1e-6));
    return;
  }
  try {
    make_attention_core(AttentionKind::Fused, 8);
    FAIL() << "fused attention built on LibTorch 1.x";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("LibTorch >= 2.0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1.13"), std::string::npos) << e.what();
  }
}

TEST(Dispatch, AttentionKindsRoundTripAndFlashRefusesDropout) {
  for (auto kind : {AttentionKind::Naive, AttentionKind::Flash, AttentionKind::Fused})
    EXPECT_EQ(parse_attention_kind(to_string(kind)), kind);
  EXPECT_THROW(parse_attention_kind("sdpa"), std::invalid_argument);
  EXPECT_THROW(make_attention_core(AttentionKind::Flash, 8)(torch::randn({1, 4, 12}), 2, 0.1),
               std::invalid_argument);
}

}  // namespace
}  // namespace ht
