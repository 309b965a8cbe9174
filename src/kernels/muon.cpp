// Muon: orthogonalized Nesterov momentum for weight matrices, AdamW for the rest, in place.
// Why: AdamW's step follows the gradient's largest directions; an orthogonalized step moves every
// singular direction of the momentum equally, the slow ones included (the lever BENCHMARKS.md names).
#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "hybrid/kernels/muon.h"
#include "kernels/adamw_loop.h"
#include "optimizer_state_io.h"

namespace ht {

at::Tensor orthogonalize_newton_schulz(const at::Tensor& m, int64_t steps, at::ScalarType dtype) {
  // Jordan's quintic: pushes every singular value of a matrix with spectral norm <= 1 towards ~1.
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = m.size(0) > m.size(1);
  at::Tensor x = tall ? m.t() : m;           // [r, n], r <= n: the Gram matrix is the small one
  x = (x / (x.norm() + 1e-7)).to(dtype);      // Frobenius norm >= spectral norm
  for (int64_t i = 0; i < steps; ++i) {
    const at::Tensor gram = at::mm(x, x.t());                      // [r, r]
    const at::Tensor poly = at::addmm(gram, gram, gram, b, c);     // b*A + c*A^2
    x = at::addmm(x, poly, x, a, 1.0);                             // a*X + (b*A + c*A^2) X
  }
  x = x.to(at::kFloat);
  return tall ? x.t() : x;
}

namespace {

constexpr int64_t kKind = 4;  // archive tag (adamw 1, sgd 2, adamw8bit 8)

// A matrix parameter seen as [rows, cols]: conv kernels flatten their input dimensions.
at::Tensor as_matrix(const at::Tensor& t) { return t.dim() == 2 ? t : t.reshape({t.size(0), -1}); }

class Muon final : public SingleRateOptimizer {
 public:
  Muon(std::vector<MuonParam> params, const MuonOptions& o) : SingleRateOptimizer(o.adamw.lr), o_(o) {
    torch::NoGradGuard no_grad;
    for (auto& p : params) {
      if (p.orthogonalize) {
        if (p.tensor.dim() < 2)
          throw std::invalid_argument("Muon: a " + std::to_string(p.tensor.dim()) +
                                      "-D parameter cannot be orthogonalized; give it AdamW's step");
        const int64_t cols = as_matrix(p.tensor).size(1);
        if (p.column_blocks < 1 || cols % p.column_blocks != 0)
          throw std::invalid_argument("Muon: " + std::to_string(p.column_blocks) + " column blocks do not divide " +
                                      std::to_string(cols) + " columns");
      }
      params_.push_back(p.tensor);
      orthogonalize_.push_back(p.orthogonalize);
      blocks_.push_back(p.orthogonalize ? p.column_blocks : 1);
      s_.m.push_back(torch::zeros_like(p.tensor, at::MemoryFormat::Contiguous));
      s_.v.push_back(p.orthogonalize ? torch::empty({0}, p.tensor.options())
                                     : torch::zeros_like(p.tensor, at::MemoryFormat::Contiguous));
    }
  }

  void step() override {
    torch::NoGradGuard no_grad;
    ++s_.t;
    const auto& a = o_.adamw;
    const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(s_.t));
    const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(s_.t));
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      const auto& g = p.grad();
      if (!g.defined()) continue;
      if (orthogonalize_[i]) {
        matrix_step(p, g, s_.m[i], blocks_[i]);
        continue;
      }
      const bool decay = !a.decay_matrices_only || p.dim() >= 2;
      adamw_update(p, g, s_.m[i], s_.v[i], {lr_, a.beta1, a.beta2, a.eps, decay ? a.weight_decay : 0.0, bc1, bc2});
    }
  }

  void zero_grad() override { zero_grads_in_place(params_); }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  std::string name() const override { return "muon"; }

  int64_t state_bytes() const override { return s_.bytes(); }

  void save(torch::serialize::OutputArchive& a) const override { s_.save(a, kKind); }
  void load(torch::serialize::InputArchive& a) override { s_.load(a, kKind, "muon"); }
  bool can_change_state(StateChange) const override { return true; }
  void change_state(StateChange change, double factor) override { s_.change(change, factor); }

 private:
  // buf = mu * buf + g; step along NS(g + mu * buf), per column block, scaled to AdamW's RMS.
  void matrix_step(at::Tensor& p, const at::Tensor& g, at::Tensor& buf, int64_t blocks) {
    buf.mul_(o_.momentum).add_(g);
    const at::Tensor nesterov = as_matrix(g.add(buf, o_.momentum).to(at::kFloat));  // [rows, cols]
    const int64_t width = nesterov.size(1) / blocks;
    const at::ScalarType ns_dtype = o_.ns_bf16 ? at::kBFloat16 : at::kFloat;
    at::Tensor update = at::empty_like(nesterov);
    for (int64_t b = 0; b < blocks; ++b) {
      const at::Tensor block = nesterov.narrow(1, b * width, width);  // [rows, width]
      const double scale = 0.2 * std::sqrt(static_cast<double>(std::max(block.size(0), block.size(1))));
      update.narrow(1, b * width, width).copy_(orthogonalize_newton_schulz(block, o_.ns_steps, ns_dtype).mul_(scale));
    }
    p.mul_(1.0 - lr_ * o_.adamw.weight_decay);
    p.add_(update.view(p.sizes()).to(p.scalar_type()), -lr_);
  }

  std::vector<at::Tensor> params_;
  std::vector<bool> orthogonalize_;
  std::vector<int64_t> blocks_;
  AdamMoments s_;  // m: the matrices' momentum buffers or AdamW's first moments; v: empty for the matrices
  MuonOptions o_;
};

}  // namespace

std::unique_ptr<Optimizer> make_muon(std::vector<MuonParam> params, const MuonOptions& options) {
  validate(options.adamw);
  if (!(options.momentum >= 0.0 && options.momentum < 1.0))
    throw std::invalid_argument("MuonOptions.momentum = " + std::to_string(options.momentum) + ": must be in [0, 1)");
  if (options.ns_steps < 1)
    throw std::invalid_argument("MuonOptions.ns_steps = " + std::to_string(options.ns_steps) + ": must be >= 1");
  return std::make_unique<Muon>(std::move(params), options);
}

}  // namespace ht
