// AdamW with one fused pass per tensor: decay, both moments and the update in a single loop,
// no temporaries (LibTorch 1.13's C++ AdamW allocates several full-size tensors per parameter).
#include <cmath>
#include <sstream>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "hybrid/kernels/optimizers.h"
#include "kernels/adamw_loop.h"
#include "kernels/dispatch.h"
#include "optimizer_state_io.h"

namespace ht {
namespace {

using AdamWStepFn = void (*)(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v,
                             const AdamWScalars& k);

// Contiguous float32 CPU tensors: one fused pass, no temporaries.
void adamw_cpu_f32(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v,
                   const AdamWScalars& k) {
  adamw_f32_range(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), p.numel(), k);
}

// ATen ops: any device, dtype or layout (torch::optim::AdamW's arithmetic).
void adamw_aten(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v,
                const AdamWScalars& k) {
  p.mul_(1.0 - k.lr * k.wd);
  m.mul_(k.beta1).add_(g, 1.0 - k.beta1);
  v.mul_(k.beta2).addcmul_(g, g, 1.0 - k.beta2);
  auto denom = (v.sqrt() / std::sqrt(k.bc2)).add_(k.eps);
  p.addcdiv_(m, denom, -k.lr / k.bc1);
}

const KernelTable<AdamWStepFn> kAdamW{
    "adamw", adamw_cpu_f32, nullptr, adamw_aten,
    "no fused kernel for bfloat16 parameters; ATen's per-op update ran (train with fp32 master "
    "weights, as train.precision = bf16 does, to use the fused one)"};

class AdamW final : public SingleRateOptimizer {
 public:
  AdamW(std::vector<at::Tensor> params, const AdamWOptions& o)
      : SingleRateOptimizer(o.lr), params_(std::move(params)), o_(o) {
    torch::NoGradGuard no_grad;
    for (const auto& p : params_) {
      s_.m.push_back(torch::zeros_like(p, at::MemoryFormat::Contiguous));
      s_.v.push_back(torch::zeros_like(p, at::MemoryFormat::Contiguous));
    }
  }

  void step() override {
    torch::NoGradGuard no_grad;
    ++s_.t;
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(s_.t));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(s_.t));
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      const auto& g = p.grad();
      if (!g.defined()) continue;
      const bool decay = !o_.decay_matrices_only || p.dim() >= 2;
      const AdamWScalars k{lr_, o_.beta1, o_.beta2, o_.eps, decay ? o_.weight_decay : 0.0, bc1, bc2};
      adamw_update(p, g, s_.m[i], s_.v[i], k);
    }
  }

  void zero_grad() override {
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  std::string name() const override { return "adamw"; }

  int64_t state_bytes() const override { return s_.bytes(); }

  void save(torch::serialize::OutputArchive& a) const override { s_.save(a, 1); }  // 1 = adamw
  void load(torch::serialize::InputArchive& a) override { s_.load(a, 1, "adamw"); }
  bool can_change_state(StateChange) const override { return true; }
  void change_state(StateChange change, double factor) override { s_.change(change, factor); }

 private:
  std::vector<at::Tensor> params_;
  AdamMoments s_;
  AdamWOptions o_;
};

}  // namespace

void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamWScalars& k) {
  const bool layout_ok = p.is_contiguous() && g.is_contiguous() && g.scalar_type() == p.scalar_type() &&
                         g.device() == p.device();
  kAdamW(kernel_path(p, layout_ok), p, g, m, v, k);
}

void adamw_f32_range(float* pw, const float* gw, float* mw, float* vw, int64_t n, const AdamWScalars& k) {
  const float b1 = static_cast<float>(k.beta1), b2 = static_cast<float>(k.beta2);
  const float decay = static_cast<float>(1.0 - k.lr * k.wd);
  const float step_size = static_cast<float>(k.lr / k.bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(k.bc2));
  const float eps = static_cast<float>(k.eps);
  at::parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t j = begin; j < end; ++j) {
      const float gj = gw[j];
      const float mj = b1 * mw[j] + (1.0f - b1) * gj;
      const float vj = b2 * vw[j] + (1.0f - b2) * gj * gj;
      mw[j] = mj;
      vw[j] = vj;
      pw[j] = pw[j] * decay - step_size * mj / (std::sqrt(vj) * inv_sqrt_bc2 + eps);
    }
  });
}

void validate(const AdamWOptions& o) {
  auto fail = [](const char* field, double v, const char* need) {
    std::ostringstream os;
    os << "AdamWOptions." << field << " = " << v << ": must be " << need;
    throw std::invalid_argument(os.str());
  };
  if (!(o.lr >= 0 && std::isfinite(o.lr))) fail("lr", o.lr, ">= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) fail("beta1", o.beta1, "in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) fail("beta2", o.beta2, "in [0, 1)");
  if (!(o.eps > 0 && std::isfinite(o.eps))) fail("eps", o.eps, "> 0");
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) fail("weight_decay", o.weight_decay, ">= 0");
}

std::unique_ptr<Optimizer> make_adamw(std::vector<at::Tensor> params, const AdamWOptions& opts) {
  validate(opts);
  return std::make_unique<AdamW>(std::move(params), opts);
}

}  // namespace ht
