// The dynamic 8-bit code: table structure, exact nearest-value lookup, and round-trip error
// bounds of block-wise quantization on moment-like data.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <torch/torch.h>

#include "hybrid/kernels/quantize8.h"

namespace {

int count_in(const ht::DynamicCode& code, float lo, float hi) {
  int n = 0;
  for (float v : code.values()) n += (v >= lo && v < hi);
  return n;
}

TEST(DynamicCode, TablesHaveTheDocumentedShape) {
  const auto& s = ht::DynamicCode::signed_code();
  const auto& u = ht::DynamicCode::unsigned_code();
  for (const auto* code : {&s, &u}) {
    for (int i = 0; i < 255; ++i) ASSERT_LT(code->value(i), code->value(i + 1));
    EXPECT_EQ(code->value(255), 1.0f);
    EXPECT_EQ(code->value(code->zero_index()), 0.0f);
  }
  EXPECT_EQ(u.value(0), 0.0f);
  EXPECT_NEAR(s.value(0), -(1.0f - 0.9f / 128), 1e-6);  // top of [0.1, 1] split in 64, negated
  // Values per decade: 2^i per sign (signed), 2^(i+1) (unsigned), for decade 10^(i-6).
  EXPECT_EQ(count_in(s, 0.1f, 1.0f), 64);
  EXPECT_EQ(count_in(s, -1.0f, -0.1f), 64);
  EXPECT_EQ(count_in(u, 0.1f, 1.0f), 128);
  EXPECT_EQ(count_in(s, 1e-7f, 1e-6f), 1);  // decade i = 0: [0.1, 1] * 1e-6
  EXPECT_EQ(count_in(u, 1e-4f, 1e-3f), 16);
}

TEST(DynamicCode, QuantizeIsTheExactNearestValue) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-9.0f, 0.0f);
  for (bool is_signed : {true, false}) {
    const auto& code =
        is_signed ? ht::DynamicCode::signed_code() : ht::DynamicCode::unsigned_code();
    for (int i = 0; i < 256; ++i) ASSERT_EQ(code.quantize(code.value(i)), i);
    for (int trial = 0; trial < 100000; ++trial) {
      float x = std::pow(10.0f, exponent(rng));
      if (is_signed && (rng() & 1)) x = -x;
      const uint8_t q = code.quantize(x);
      ASSERT_EQ(q, code.quantize_by_search(x)) << x;
      float best = INFINITY;
      for (float v : code.values()) best = std::min(best, std::fabs(x - v));
      ASSERT_LE(std::fabs(x - code.value(q)), best + 1e-7f) << x;
      // Stochastic: the bracketing pair by brute force, and the documented coin.
      int lo = 0;
      while (lo < 254 && code.value(lo + 1) <= x) ++lo;
      const float u = static_cast<float>(trial % 1000) / 1000.0f;
      const float a = code.value(lo), b = code.value(lo + 1);
      ASSERT_EQ(code.quantize_stochastic(x, u), lo + (u * (b - a) < x - a ? 1 : 0)) << x;
    }
    EXPECT_EQ(code.quantize(0.0f), code.zero_index());
    EXPECT_EQ(code.quantize(-0.0f), code.zero_index());
    EXPECT_EQ(code.quantize(1e-30f), code.zero_index());
  }
}

TEST(DynamicCode, StochasticRoundingIsUnbiased) {
  const auto& code = ht::DynamicCode::unsigned_code();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (float x : {0.00123f, 0.0371f, 0.5f, 0.99f, code.value(200)}) {
    const uint8_t nearest = code.quantize(x);
    double sum = 0.0;
    const int n = 100000;
    for (int i = 0; i < n; ++i) {
      const uint8_t q = code.quantize_stochastic(x, uniform(rng));
      ASSERT_LE(std::abs(int(q) - int(nearest)), 1);  // one of the two bracketing values
      sum += code.value(q);
    }
    EXPECT_NEAR(sum / n, x, 0.01 * x) << x;  // the nearest value alone is off by up to 3.5 %
  }
  EXPECT_EQ(code.quantize_stochastic(1.0f, 0.999f), 255);
  EXPECT_EQ(code.quantize_stochastic(0.0f, 0.0f), code.zero_index());
}

TEST(DynamicCode, BlockFormsMatchTheOneValueForms) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-12.0f, 0.0f), uniform(0.0f, 1.0f);
  const int64_t n = 4099;
  std::vector<float> x(n), u(n), back(n);
  for (int64_t j = 0; j < n; ++j) {
    x[j] = std::pow(10.0f, exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    u[j] = uniform(rng);
  }
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1.0f, x[3] = -1.0f, x[4] = 1e-30f;
  const float inv = 0.999f;  // a block's 1 / absmax
  std::vector<uint8_t> nearest(n), stochastic(n);
  for (bool is_signed : {true, false}) {
    const auto& code = is_signed ? ht::DynamicCode::signed_code() : ht::DynamicCode::unsigned_code();
    std::vector<float> xs = x;
    if (!is_signed)
      for (float& v : xs) v = std::fabs(v);
    code.quantize(xs.data(), inv, nearest.data(), n);
    code.quantize_stochastic(xs.data(), inv, u.data(), stochastic.data(), n);
    code.dequantize(nearest.data(), 0.37f, back.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(nearest[j], code.quantize(xs[j] * inv)) << j;
      ASSERT_EQ(stochastic[j], code.quantize_stochastic(xs[j] * inv, u[j])) << j;
      ASSERT_EQ(back[j], code.value(nearest[j]) * 0.37f) << j;
    }
  }
}

// Largest gap between neighbouring code values at or above `from`.
float max_gap(const ht::DynamicCode& code, float from) {
  float gap = 0.0f;
  for (int i = 0; i < 255; ++i)
    if (code.value(i + 1) > from) gap = std::max(gap, code.value(i + 1) - code.value(i));
  return gap;
}

// Mean of |x - x'| / |x| over the non-zero entries.
double mean_relative_error(const at::Tensor& x, const at::Tensor& back) {
  auto nz = x != 0;
  return ((x - back).abs().masked_select(nz) / x.abs().masked_select(nz)).mean().item<double>();
}

TEST(BlockQuantization, RoundTripErrorIsBoundedByTheCodeSpacing) {
  torch::manual_seed(0);
  const int64_t bs = 256;
  auto m = torch::randn({100, 300}) * 1e-3;           // first-moment-like: signed, Gaussian
  auto v = torch::randn({100, 300}).square() * 1e-6;  // second-moment-like: >= 0, heavy tail
  for (bool is_signed : {true, false}) {
    const auto& code =
        is_signed ? ht::DynamicCode::signed_code() : ht::DynamicCode::unsigned_code();
    const auto x = (is_signed ? m : v).flatten();
    const int64_t n = x.numel(), blocks = (n + bs - 1) / bs;
    auto q = ht::quantize_blockwise(x, code, bs);
    ASSERT_EQ(q.codes.numel(), n);
    ASSERT_EQ(q.absmax.numel(), blocks);
    auto padded = torch::cat({x.abs(), torch::zeros({blocks * bs - n})}).view({blocks, bs});
    EXPECT_TRUE(torch::equal(q.absmax, std::get<0>(padded.max(1))));

    auto back = ht::dequantize_blockwise(q, code);
    auto absmax = q.absmax.repeat_interleave(bs).narrow(0, 0, n);
    // Nearest value: never off by more than half the widest gap of the code, times the absmax.
    const float half_gap = 0.5f * max_gap(code, 0.0f);
    EXPECT_TRUE(((x - back).abs() <= absmax * half_gap * 1.0001f).all().item<bool>());
    // The entry equal to the absmax comes back exactly (code 1) or, if negative, 0.7 % short:
    // bitsandbytes' signed code has +1 but no -1.
    const float top = back.narrow(0, 0, bs).abs().max().item<float>();
    EXPECT_NEAR(top, q.absmax[0].item<float>(), 0.0071 * q.absmax[0].item<float>());

    // Against linear int8 (absmax / 127 steps) the dynamic code keeps small entries: mean
    // relative error 1.5 % vs 3.2 % on the Gaussian, 1.7 % vs 21 % on the squared Gaussian.
    auto linear = (x / absmax * 127).round() * absmax / 127;
    const double dyn = mean_relative_error(x, back), lin = mean_relative_error(x, linear);
    EXPECT_LT(dyn, 0.02);
    EXPECT_LT(dyn * (is_signed ? 1.8 : 8.0), lin) << "dynamic " << dyn << " linear " << lin;
  }
}

TEST(BlockQuantization, ZeroBlockAndPartialLastBlock) {
  auto x = torch::zeros({300});
  x.narrow(0, 256, 44).fill_(0.5);
  auto q = ht::quantize_blockwise(x, ht::DynamicCode::signed_code(), 256);
  EXPECT_EQ(q.absmax[0].item<float>(), 0.0f);
  EXPECT_EQ(q.absmax[1].item<float>(), 0.5f);
  EXPECT_TRUE(torch::equal(ht::dequantize_blockwise(q, ht::DynamicCode::signed_code()), x));
  // Other dtypes take ATen's fallback (dispatch_test.cpp): the same codes, partial block included.
  const auto qd = ht::quantize_blockwise(x.to(torch::kDouble), ht::DynamicCode::signed_code(), 256);
  EXPECT_TRUE(torch::equal(qd.codes, q.codes));
  EXPECT_TRUE(torch::equal(qd.absmax, q.absmax));
  EXPECT_THROW(ht::quantize_blockwise(x, ht::DynamicCode::signed_code(), 0), std::invalid_argument);
}

}  // namespace
