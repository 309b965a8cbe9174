// GEMM dispatch and the Conv1D linear layer: every operand layout against at::addmm, on both
// backends, and the linear layer's gradients against autograd through at::addmm.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/gemm.h"
#include "kernels/linear.h"

namespace ht {
namespace {

// Restores the backend a test changed.
class GemmBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    saved_ = gemm_backend();
    if (GetParam() == "onednn" && !onednn_gemm_available()) GTEST_SKIP() << "no oneDNN loaded";
    set_gemm_backend(GetParam());
  }
  void TearDown() override { set_gemm_backend(saved_); }
  std::string saved_;
};

TEST_P(GemmBackendTest, EveryLayoutMatchesAddmm) {
  EXPECT_EQ(gemm_backend(), GetParam());
  torch::manual_seed(0);
  const int64_t M = 37, K = 53, N = 29;
  const auto a = torch::randn({M, K}), b = torch::randn({K, N});
  const auto a_t = torch::randn({K, M}).t(), b_t = torch::randn({N, K}).t();  // transposed
  const auto a_s = torch::randn({M, 2 * K}).narrow(1, 5, K);                  // row stride 2K
  for (const auto& [x, y] : std::vector<std::pair<at::Tensor, at::Tensor>>{
           {a, b}, {a_t, b}, {a, b_t}, {a_t, b_t}, {a_s, b}}) {
    const auto ref0 = torch::randn({M, N});
    auto out = ref0.clone();
    matmul_into(out, x, y, 0.5f, 2.0f);
    EXPECT_TRUE(torch::allclose(out, torch::addmm(ref0, x, y, 2.0, 0.5), 1e-4, 1e-4));
  }
  // beta = 0 ignores the old contents, NaN included; out may be a strided view.
  auto big = torch::full({M, N + 7}, NAN);
  auto view = big.narrow(1, 3, N);
  matmul_into(view, a, b);
  EXPECT_TRUE(torch::allclose(view, torch::mm(a, b), 1e-4, 1e-4));
  EXPECT_TRUE(torch::isnan(big.narrow(1, 0, 3)).all().item<bool>());
  EXPECT_TRUE(torch::allclose(matmul2d(a, b), torch::mm(a, b), 1e-4, 1e-4));
}

TEST_P(GemmBackendTest, LinearGradientsMatchAutogradAddmm) {
  torch::manual_seed(0);
  const auto x = torch::randn({3, 5, 16}, torch::requires_grad());
  const auto w = torch::randn({16, 24}, torch::requires_grad());
  const auto b = torch::randn({24}, torch::requires_grad());
  const auto dy = torch::randn({3, 5, 24});
  const auto y = linear_in_out(x, w, b);
  ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{3, 5, 24}));
  const auto g = torch::autograd::grad({y}, {x, w, b}, {dy});
  const auto y_ref = torch::addmm(b, x.view({15, 16}), w).view({3, 5, 24});
  const auto g_ref = torch::autograd::grad({y_ref}, {x, w, b}, {dy});
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-5, 1e-5));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(g[i], g_ref[i], 1e-4, 1e-5)) << i;
  // Only what requires grad gets one.
  const auto xs = torch::randn({4, 16});
  const auto gw = torch::autograd::grad({linear_in_out(xs, w, b).sum()}, {w})[0];
  EXPECT_TRUE(torch::allclose(gw, xs.sum(0).unsqueeze(1).expand({16, 24}), 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmBackendTest, ::testing::Values("aten", "onednn"));

TEST(Gemm, UnknownBackendIsRejected) {
  EXPECT_THROW(set_gemm_backend("mkl"), std::invalid_argument);
}

}  // namespace
}  // namespace ht
