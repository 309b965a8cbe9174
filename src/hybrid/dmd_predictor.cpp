// Predictor (b): a low-rank linear model of each tensor's update trajectory (DMD / Koopman style).
// Per tensor the last K updates are kept as rows of a [K, N] matrix; a recurrence
// d[t] = sum_{j=1..p} c[j] d[t-j] is fitted by least squares through the K x K Gram matrix, and the
// prediction h steps ahead is a combination of the stored rows: one GEMV, no N x N anything.
// On SGD over a quadratic the updates are sums of geometric modes, which the recurrence captures
// exactly once p >= the number of distinct modes.
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "archive_io.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/errors.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor.h"
#include "hybrid/hybrid/predictor_registry.h"

namespace ht {
namespace {

// Solves A x = b in place (A is n x n row-major) by Gaussian elimination with partial pivoting.
// n is the recurrence order (a handful), so this is cheaper than any library call.
std::vector<double> solve(std::vector<double> A, std::vector<double> b, int64_t n) {
  for (int64_t col = 0; col < n; ++col) {
    int64_t piv = col;
    for (int64_t r = col + 1; r < n; ++r) {
      if (std::abs(A[r * n + col]) > std::abs(A[piv * n + col])) piv = r;
    }
    if (piv != col) {
      for (int64_t k = 0; k < n; ++k) std::swap(A[col * n + k], A[piv * n + k]);
      std::swap(b[col], b[piv]);
    }
    const double d = A[col * n + col];
    if (d == 0.0) continue;  // a zero column: that coefficient stays 0
    for (int64_t r = col + 1; r < n; ++r) {
      const double f = A[r * n + col] / d;
      if (f == 0.0) continue;
      for (int64_t k = col; k < n; ++k) A[r * n + k] -= f * A[col * n + k];
      b[r] -= f * b[col];
    }
  }
  std::vector<double> x(n, 0.0);
  for (int64_t r = n - 1; r >= 0; --r) {
    const double d = A[r * n + r];
    if (d == 0.0) continue;
    double s = b[r];
    for (int64_t k = r + 1; k < n; ++k) s -= A[r * n + k] * x[k];
    x[r] = s / d;
  }
  return x;
}

class DmdPredictor : public UpdatePredictor {
 public:
  DmdPredictor(int64_t history, int64_t rank, double ridge) : K_(history), p_(rank), ridge_(ridge) {
    if (rank < 1 || rank >= history) {
      throw std::invalid_argument("dmd predictor: rank must be in [1, history - 1], got rank " +
                                  std::to_string(rank) + " with history " + std::to_string(history));
    }
  }

  std::string name() const override { return "dmd"; }

  void observe(const std::vector<at::Tensor>& deltas, const TrainingFeatures&) override {
    torch::NoGradGuard no_grad;
    if (ring_.empty()) {
      for (const auto& d : deltas) {
        ring_.push_back(torch::zeros({K_, d.numel()}, d.options().requires_grad(false)));  // [K, N]
      }
    }
    for (size_t i = 0; i < deltas.size(); ++i) ring_[i][head_].copy_(deltas[i].reshape({-1}));
    head_ = (head_ + 1) % K_;
    ++count_;
    fitted_ = false;
  }

  void reset_history() override {
    count_ = 0;
    head_ = 0;
    fitted_ = false;
  }

  bool ready() const override { return count_ >= K_; }

  void predict_into(std::vector<at::Tensor>& out, int64_t steps_ahead, double scale) override {
    if (!ready()) throw std::logic_error("dmd predictor: predict_into with fewer than history updates");
    if (steps_ahead < 1) throw std::invalid_argument("dmd predictor: steps_ahead must be >= 1");
    fit();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < out.size(); ++i) {
      std::vector<double> w = row_weights(i, steps_ahead);  // [K] in slot order
      for (double& x : w) x *= scale;
      at::Tensor wt = torch::tensor(w, torch::kDouble).to(ring_[i].options());
      at::Tensor flat = out[i].view({-1});  // [N]
      at::mv_out(flat, ring_[i].t(), wt);
    }
  }

  double self_confidence() const override {
    if (!ready()) return 0.0;
    const_cast<DmdPredictor*>(this)->fit();
    return std::max(0.0, 1.0 - residual_);
  }

  int64_t state_bytes() const override {
    int64_t b = 0;
    for (const auto& t : ring_) b += t.numel() * static_cast<int64_t>(t.element_size());
    return b;
  }

  void save(torch::serialize::OutputArchive& a) const override {
    archive_io::put(a, "count", count_);
    archive_io::put(a, "head", head_);
    archive_io::put_tensors(a, "ring", ring_);
  }

  void load(torch::serialize::InputArchive& a) override {
    count_ = archive_io::get_int(a, "count");
    head_ = archive_io::get_int(a, "head");
    archive_io::get_tensors_into(a, "ring", ring_);
    fitted_ = false;
  }

 private:
  // Slot of the t-th oldest stored update (t = 0..K-1).
  int64_t slot(int64_t t) const { return (head_ + t) % K_; }

  void fit() {
    if (fitted_) return;
    torch::NoGradGuard no_grad;
    coef_.assign(ring_.size(), std::vector<double>(p_, 0.0));
    gram_.assign(ring_.size(), std::vector<double>(K_ * K_, 0.0));
    double res_sum = 0.0, weight_sum = 0.0;
    for (size_t i = 0; i < ring_.size(); ++i) {
      // Gram in chronological order: G[a][b] = <d_a, d_b>. Accumulated in double: geometric
      // updates are nearly collinear and the fit lives in the small differences between them.
      const at::Tensor r = ring_[i].to(torch::kDouble);  // [K, N], freed after the product
      at::Tensor g = at::mm(r, r.t()).to(torch::kCPU).contiguous();  // [K, K]
      const double* gs = g.data_ptr<double>();
      std::vector<double>& G = gram_[i];
      for (int64_t a = 0; a < K_; ++a) {
        for (int64_t b = 0; b < K_; ++b) G[a * K_ + b] = gs[slot(a) * K_ + slot(b)];
      }
      // Normal equations over the equations t = p..K-1: A c = b.
      std::vector<double> A(p_ * p_, 0.0), rhs(p_, 0.0);
      double energy = 0.0;
      for (int64_t t = p_; t < K_; ++t) {
        energy += G[t * K_ + t];
        for (int64_t j = 0; j < p_; ++j) {
          rhs[j] += G[t * K_ + (t - 1 - j)];
          for (int64_t k = 0; k < p_; ++k) A[j * p_ + k] += G[(t - 1 - j) * K_ + (t - 1 - k)];
        }
      }
      std::vector<double> A_ridged = A;
      double trace = 0.0;
      for (int64_t j = 0; j < p_; ++j) trace += A[j * p_ + j];
      const double lambda = ridge_ * trace / static_cast<double>(p_) + 1e-300;
      for (int64_t j = 0; j < p_; ++j) A_ridged[j * p_ + j] += lambda;
      std::vector<double> c = solve(A_ridged, rhs, p_);
      // Residual of the fit from the Gram alone: sum_t |d_t|^2 - 2 c.b + c^T A c.
      double cAc = 0.0, cb = 0.0;
      for (int64_t j = 0; j < p_; ++j) {
        cb += c[j] * rhs[j];
        for (int64_t k = 0; k < p_; ++k) cAc += c[j] * A[j * p_ + k] * c[k];
      }
      const double rel = energy > 0.0 ? std::max(0.0, energy - 2.0 * cb + cAc) / energy : 0.0;
      const double w = static_cast<double>(ring_[i].size(1));
      res_sum += w * std::min(1.0, rel);
      weight_sum += w;
      coef_[i] = std::move(c);
    }
    residual_ = weight_sum > 0.0 ? res_sum / weight_sum : 1.0;
    fitted_ = true;
  }

  // Weights over the stored rows (slot order) whose combination is the update steps_ahead after
  // the newest one. Each future update is a vector of K chronological coefficients.
  std::vector<double> row_weights(size_t i, int64_t steps_ahead) const {
    const std::vector<double>& c = coef_[i];
    std::vector<std::vector<double>> v;  // v[t]: coefficients of update t over the stored ones
    v.reserve(static_cast<size_t>(K_ + steps_ahead));
    for (int64_t t = 0; t < K_; ++t) {
      std::vector<double> e(K_, 0.0);
      e[t] = 1.0;
      v.push_back(std::move(e));
    }
    for (int64_t t = K_; t < K_ + steps_ahead; ++t) {
      std::vector<double> next(K_, 0.0);
      for (int64_t j = 0; j < p_; ++j) {
        for (int64_t k = 0; k < K_; ++k) next[k] += c[j] * v[t - 1 - j][k];
      }
      v.push_back(std::move(next));
    }
    std::vector<double> w = v.back();
    // A fitted root outside the unit circle makes the extrapolation grow without bound; cap the
    // predicted norm at twice the newest update's (|w|_G^2 = w^T G w, no pass over the weights).
    const std::vector<double>& G = gram_[i];
    double norm2 = 0.0;
    for (int64_t a = 0; a < K_; ++a) {
      for (int64_t b = 0; b < K_; ++b) norm2 += w[a] * G[a * K_ + b] * w[b];
    }
    const double last2 = G[(K_ - 1) * K_ + (K_ - 1)];
    if (norm2 > 4.0 * last2 && norm2 > 0.0) {
      const double s = std::sqrt(4.0 * last2 / norm2);
      for (double& x : w) x *= s;
    }
    std::vector<double> by_slot(K_, 0.0);
    for (int64_t t = 0; t < K_; ++t) by_slot[slot(t)] = w[t];
    return by_slot;
  }

  int64_t K_, p_;
  double ridge_;
  std::vector<at::Tensor> ring_;  // per parameter: [K, N] updates, row slot(t) is the t-th oldest
  int64_t head_ = 0;              // slot the next update goes to
  int64_t count_ = 0;             // updates since the last reset
  bool fitted_ = false;
  std::vector<std::vector<double>> coef_;  // per parameter: [p] recurrence coefficients
  std::vector<std::vector<double>> gram_;  // per parameter: [K, K] chronological Gram
  double residual_ = 1.0;                  // numel-weighted relative fit residual
};

}  // namespace

std::unique_ptr<UpdatePredictor> make_dmd_predictor(int64_t history, int64_t rank, double ridge) {
  return std::make_unique<DmdPredictor>(history, rank, ridge);
}

// The registry's entry (predictor_registry.cpp). State: a ring of K updates per tensor, [K, n].
PredictorSpec dmd_predictor_spec() {
  return {"dmd", "a low-rank linear recurrence of the updates, fitted online", UpdatePredictor::Input::Updates,
          {{"dmd_history", 8, 2, 1024, true, "dmd predictor: updates kept per tensor (K)"},
           {"dmd_rank", 4, 1, 1023, true, "dmd predictor: order of the recurrence fitted over them (< dmd_history)"},
           {"dmd_ridge", 1e-6, 0.0, 1.0, false, "dmd predictor: relative Tikhonov term of the least squares"}},
          [](const HybridOptions& o) {
            return make_dmd_predictor(static_cast<int64_t>(o.predictor_option("dmd_history")),
                                      static_cast<int64_t>(o.predictor_option("dmd_rank")), o.predictor_option("dmd_ridge"));
          },
          [](const std::vector<int64_t>& numels, const HybridOptions& o) {
            const auto k = static_cast<int64_t>(o.predictor_option("dmd_history"));
            int64_t bytes = 0;
            for (int64_t n : numels) bytes += allocator_block_bytes(k * n * 4);
            return bytes;
          },
          [](const HybridOptions& o) {
            if (o.predictor_option("dmd_rank") >= o.predictor_option("dmd_history"))
              throw OptionsError("HybridOptions.dmd_rank = " + std::to_string(static_cast<int64_t>(o.predictor_option("dmd_rank"))) +
                                 ": must be < dmd_history (" +
                                 std::to_string(static_cast<int64_t>(o.predictor_option("dmd_history"))) + ")");
          }};
}

}  // namespace ht
