// 8-bit AdamW: moments live as uint8 codes of the dynamic map plus one fp32 absmax per block; the
// step dequantizes, updates and requantizes a block at a time, so no full-size fp32 copy exists.
#include "hybrid/kernels/adamw8bit.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "hybrid/kernels/quantize8.h"
#include "kernels/dispatch.h"
#include "kernels/quantize8_aten.h"

namespace ht {
namespace {

constexpr int64_t kKind = 8;  // archive tag: ht::make_adamw writes 1, SGD 2

// Two uniform [0, 1) numbers from one 64-bit counter (splitmix64's finaliser, 24 bits each): a
// counter-based generator, so each element's draws depend only on (step, tensor, element), not
// on threads or order.
inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr float kTwoToMinus24 = 1.0f / 16777216.0f;

// u1[j], u2[j] for counters base + j, j < n.
void uniform01_pairs(uint64_t base, int64_t n, float* u1, float* u2) {
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t z = splitmix64(base + static_cast<uint64_t>(j));
    u1[j] = static_cast<float>(static_cast<uint32_t>(z >> 40)) * kTwoToMinus24;
    u2[j] = static_cast<float>(static_cast<uint32_t>(z >> 16) & 0xFFFFFFu) * kTwoToMinus24;
  }
}

struct BlockScalars {
  float beta1, beta2, eps, decay, step_size, inv_sqrt_bc2;
};

// Bits of a float >= 0 as a signed integer: ordered as the floats are, so a maximum over them is
// an integer maximum, which the compiler vectorises (a float one it may not, for NaN and -0).
// NaN (only after the moments overflowed) counts as 0, as the sequential std::max skipped it.
inline int32_t nonnegative_bits(float x) {
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return x == x ? i : 0;
}

// One block's AdamW update with fp32 moments: moves p, replaces m and v by their new values and
// returns the largest |m| and v (the block's new absmax, to requantize with). Arrays that cannot
// alias and scalars by value, so that the loops vectorise.
std::pair<float, float> update_block(float* __restrict p, const float* __restrict g,
                                     float* __restrict m, float* __restrict v, int64_t n,
                                     BlockScalars k) {
  const float b1 = k.beta1, b2 = k.beta2, eps = k.eps, decay = k.decay;
  const float step_size = k.step_size, inv_sqrt_bc2 = k.inv_sqrt_bc2;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float mj = b1 * m[j] + (1.0f - b1) * g[j];
    const float vj = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
    p[j] = p[j] * decay - step_size * mj / (std::sqrt(vj) * inv_sqrt_bc2 + eps);
    m[j] = mj;
    v[j] = vj;
  }
  int32_t m_max = 0, v_max = 0;  // bits of +0.0f
  for (int64_t j = 0; j < n; ++j) {
    m_max = std::max(m_max, nonnegative_bits(std::fabs(m[j])));
    v_max = std::max(v_max, nonnegative_bits(v[j]));
  }
  float m_abs, v_abs;
  std::memcpy(&m_abs, &m_max, sizeof m_abs);
  std::memcpy(&v_abs, &v_max, sizeof v_abs);
  return {m_abs, v_abs};
}

// The same counter-based uniforms in ATen ops, for counters base + j, j < n, on `device`: int64
// arithmetic wraps as uint64 does, and >> on int64 is arithmetic, so logical shifts mask.
std::pair<at::Tensor, at::Tensor> uniform01_pairs_aten(uint64_t base, int64_t n,
                                                       const at::Device& device) {
  auto shr = [](const at::Tensor& z, int k) {  // logical z >> k
    return at::bitwise_and(at::bitwise_right_shift(z, k), (int64_t{1} << (64 - k)) - 1);
  };
  auto as_i64 = [](uint64_t u) {
    int64_t i;
    std::memcpy(&i, &u, sizeof i);
    return i;
  };
  at::Tensor z = at::arange(n, at::TensorOptions().dtype(at::kLong).device(device)) + as_i64(base);
  z = at::bitwise_xor(z, shr(z, 30)) * as_i64(0xBF58476D1CE4E5B9ull);
  z = at::bitwise_xor(z, shr(z, 27)) * as_i64(0x94D049BB133111EBull);
  z = at::bitwise_xor(z, shr(z, 31));
  const at::Tensor u1 = shr(z, 40).to(at::kFloat) * kTwoToMinus24;
  const at::Tensor u2 = at::bitwise_and(shr(z, 16), 0xFFFFFF).to(at::kFloat) * kTwoToMinus24;
  return {u1, u2};
}

bool all_finite(const at::Tensor& g) {
  if (!g.device().is_cpu() || g.scalar_type() != at::kFloat) return at::isfinite(g).all().item<bool>();
  const float* d = g.data_ptr<float>();
  std::atomic<bool> finite{true};
  at::parallel_for(0, g.numel(), 65536, [&](int64_t begin, int64_t end) {
    int bad = 0;
    for (int64_t j = begin; j < end; ++j) bad |= !(std::fabs(d[j]) <= FLT_MAX);  // NaN fails too
    if (bad) finite = false;
  });
  return finite;
}

at::Tensor read_tensor(torch::serialize::InputArchive& a, const std::string& key) {
  at::Tensor t;
  a.read(key, t);
  return t;
}

// Copies a saved tensor into the optimizer's own, checking that it belongs to the same model.
void read_into(torch::serialize::InputArchive& a, const std::string& key, at::Tensor& dst) {
  at::Tensor t = read_tensor(a, key);
  if (t.scalar_type() != dst.scalar_type() || !t.sizes().equals(dst.sizes()))
    throw std::runtime_error("adamw8bit state '" + key + "' is " + c10::str(t.sizes()) + " " +
                             std::string(c10::toString(t.scalar_type())) + ", expected " +
                             c10::str(dst.sizes()) + " " + c10::toString(dst.scalar_type()) +
                             ": checkpoint of another model or other AdamW8bitOptions?");
  dst.copy_(t);
}

}  // namespace

AdamW8bit::AdamW8bit(std::vector<at::Tensor> params, const AdamWOptions& opts,
                     const AdamW8bitOptions& quant)
    : SingleRateOptimizer(opts.lr), params_(std::move(params)), opts_(opts), quant_(quant) {
  validate(opts);
  if (quant.block_size < 1 || quant.min_quantized_numel < 0)
    throw std::invalid_argument("adamw8bit: need block_size >= 1 and min_quantized_numel >= 0");
  torch::NoGradGuard no_grad;
  const DynamicCode& sc = DynamicCode::signed_code();
  const DynamicCode& uc = DynamicCode::unsigned_code();
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (p.scalar_type() != at::kFloat || !p.is_contiguous() || p.device() != params_[0].device())
      throw std::invalid_argument("adamw8bit: parameter " + std::to_string(i) +
                                  " is not a contiguous float32 tensor on the first one's device; "
                                  "8-bit AdamW keeps fp32 master weights (bf16 compute keeps them "
                                  "too: train.precision = bf16) - use ht::make_adamw for the rest");
    State s;
    const int64_t n = p.numel();
    s.quantized = n >= quant.min_quantized_numel;
    if (s.quantized) {
      const int64_t blocks = (n + quant.block_size - 1) / quant.block_size;
      const auto bytes = p.options().dtype(at::kByte);
      s.m_codes = at::full({n}, static_cast<int64_t>(sc.zero_index()), bytes);
      s.v_codes = at::full({n}, static_cast<int64_t>(uc.zero_index()), bytes);
      s.m_absmax = at::zeros({blocks}, p.options());
      s.v_absmax = at::zeros({blocks}, p.options());
    } else {
      s.m = at::zeros({n}, p.options());
      s.v = at::zeros({n}, p.options());
    }
    states_.push_back(std::move(s));
  }
}

void AdamW8bit::step() {
  torch::NoGradGuard no_grad;
  for (const auto& p : params_)
    if (p.grad().defined() && !all_finite(p.grad().contiguous())) {
      ++skipped_;
      return;
    }
  ++step_;
  const double bc1 = 1.0 - std::pow(opts_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(opts_.beta2, static_cast<double>(step_));
  const float step_size = static_cast<float>(lr_ / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const bool decays = !opts_.decay_matrices_only || p.dim() >= 2;
    const float decay = static_cast<float>(1.0 - lr_ * (decays ? opts_.weight_decay : 0.0));
    using StepFn = void (AdamW8bit::*)(size_t, float, float, float);
    static const KernelTable<StepFn> table{"adamw8bit", &AdamW8bit::cpu_step, nullptr,
                                           &AdamW8bit::aten_step, ""};
    const at::Tensor& g = p.grad();
    const bool layout_ok = g.is_contiguous() && g.scalar_type() == at::kFloat && g.device() == p.device();
    (this->*table.select(kernel_path(p, layout_ok)))(i, decay, step_size, inv_sqrt_bc2);
  }
}

void AdamW8bit::cpu_step(size_t index, float decay, float step_size, float inv_sqrt_bc2) {
  if (states_[index].quantized)
    quantized_step(index, decay, step_size, inv_sqrt_bc2);
  else
    fp32_step(params_[index], params_[index].grad(), states_[index], decay, step_size, inv_sqrt_bc2);
}

// The CPU kernel's arithmetic in ATen ops on the parameter's device: dequantize the moments,
// update them and p in fp32, requantize with the same code and the same counter-based uniforms.
void AdamW8bit::aten_step(size_t index, float decay, float step_size, float inv_sqrt_bc2) {
  at::Tensor& p = params_[index];
  const at::Tensor g = p.grad().to(at::kFloat).reshape({-1});  // [n]
  State& s = states_[index];
  const float b1 = static_cast<float>(opts_.beta1), b2 = static_cast<float>(opts_.beta2);
  const float eps = static_cast<float>(opts_.eps);
  const int64_t n = p.numel(), bs = quant_.block_size;
  const DynamicCode& sc = DynamicCode::signed_code();
  const DynamicCode& uc = DynamicCode::unsigned_code();
  at::Tensor m = s.quantized ? dequantize_blockwise_aten({s.m_codes, s.m_absmax, bs}, sc) : s.m;
  at::Tensor v = s.quantized ? dequantize_blockwise_aten({s.v_codes, s.v_absmax, bs}, uc) : s.v;
  m = m * b1 + g * (1.0f - b1);
  v = v * b2 + g * g * (1.0f - b2);
  at::Tensor pf = p.view({-1});
  pf.copy_(pf * decay - m * step_size / (v.sqrt() * inv_sqrt_bc2 + eps));
  if (!s.quantized) {
    s.m.copy_(m);
    s.v.copy_(v);
    return;
  }
  at::Tensor um, uv;
  if (quant_.rounding == AdamW8bitOptions::Rounding::Stochastic) {
    const uint64_t key = (static_cast<uint64_t>(step_) * 0x9E3779B97F4A7C15ull) ^
                         (static_cast<uint64_t>(index) << 40);
    std::tie(um, uv) = uniform01_pairs_aten(key, n, p.device());
  }
  const BlockQuantized qm = quantize_blockwise_aten(m, sc, bs, um);
  const BlockQuantized qv = quantize_blockwise_aten(v, uc, bs, uv);
  s.m_codes.copy_(qm.codes);
  s.v_codes.copy_(qv.codes);
  s.m_absmax.copy_(qm.absmax);
  s.v_absmax.copy_(qv.absmax);
}

void AdamW8bit::quantized_step(size_t index, float decay, float step_size, float inv_sqrt_bc2) {
  at::Tensor& p = params_[index];
  const at::Tensor g = p.grad().contiguous();
  State& s = states_[index];
  const bool stochastic = quant_.rounding == AdamW8bitOptions::Rounding::Stochastic;
  // Counter base for this tensor at this step; the element index is added.
  const uint64_t key =
      (static_cast<uint64_t>(step_) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(index) << 40);
  const DynamicCode& sc = DynamicCode::signed_code();
  const DynamicCode& uc = DynamicCode::unsigned_code();
  const BlockScalars k{static_cast<float>(opts_.beta1), static_cast<float>(opts_.beta2),
                      static_cast<float>(opts_.eps), decay, step_size, inv_sqrt_bc2};
  const int64_t n = p.numel(), bs = quant_.block_size, blocks = s.m_absmax.numel();
  float* pd = p.data_ptr<float>();
  const float* gd = g.data_ptr<float>();
  uint8_t* mq = s.m_codes.data_ptr<uint8_t>();
  uint8_t* vq = s.v_codes.data_ptr<uint8_t>();
  float* ma = s.m_absmax.data_ptr<float>();
  float* va = s.v_absmax.data_ptr<float>();
  // Blocks are independent, so the result does not depend on the thread count.
  at::parallel_for(0, blocks, std::max<int64_t>(1, 16384 / bs), [&](int64_t begin, int64_t end) {
    std::vector<float> buffers(4 * bs);  // one block of moments in fp32, and its random numbers
    float* mb = buffers.data();
    float* vb = mb + bs;
    float* um = vb + bs;
    float* uv = um + bs;
    for (int64_t b = begin; b < end; ++b) {
      const int64_t lo = b * bs, len = std::min(bs, n - lo);
      sc.dequantize(mq + lo, ma[b], mb, len);
      uc.dequantize(vq + lo, va[b], vb, len);
      // The parameter moves with the exact fp32 moments; only their storage is 8-bit.
      const auto [m_max, v_max] = update_block(pd + lo, gd + lo, mb, vb, len, k);
      const float m_inv = m_max > 0.0f ? 1.0f / m_max : 0.0f;
      const float v_inv = v_max > 0.0f ? 1.0f / v_max : 0.0f;
      if (stochastic) {
        uniform01_pairs(key + static_cast<uint64_t>(lo), len, um, uv);
        sc.quantize_stochastic(mb, m_inv, um, mq + lo, len);
        uc.quantize_stochastic(vb, v_inv, uv, vq + lo, len);
      } else {
        sc.quantize(mb, m_inv, mq + lo, len);
        uc.quantize(vb, v_inv, vq + lo, len);
      }
      ma[b] = m_max;
      va[b] = v_max;
    }
  });
}

void AdamW8bit::fp32_step(at::Tensor& p, const at::Tensor& g, State& s, float decay,
                          float step_size, float inv_sqrt_bc2) {
  const float b1 = static_cast<float>(opts_.beta1), b2 = static_cast<float>(opts_.beta2);
  const float eps = static_cast<float>(opts_.eps);
  float* pd = p.data_ptr<float>();
  const float* gd = g.data_ptr<float>();
  float* md = s.m.data_ptr<float>();
  float* vd = s.v.data_ptr<float>();
  for (int64_t e = 0; e < p.numel(); ++e) {  // < min_quantized_numel elements: not worth threads
    md[e] = b1 * md[e] + (1.0f - b1) * gd[e];
    vd[e] = b2 * vd[e] + (1.0f - b2) * gd[e] * gd[e];
    pd[e] = pd[e] * decay - step_size * md[e] / (std::sqrt(vd[e]) * inv_sqrt_bc2 + eps);
  }
}

void AdamW8bit::zero_grad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

int64_t AdamW8bit::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : states_)
    for (const at::Tensor* t : {&s.m_codes, &s.v_codes, &s.m_absmax, &s.v_absmax, &s.m, &s.v})
      if (t->defined()) bytes += t->nbytes();
  return bytes;
}

at::Tensor AdamW8bit::first_moment(size_t i) const {
  const State& s = states_.at(i);
  if (!s.quantized) return s.m.view(params_[i].sizes()).clone();
  return dequantize_blockwise({s.m_codes, s.m_absmax, quant_.block_size},
                              DynamicCode::signed_code())
      .view(params_[i].sizes());
}

at::Tensor AdamW8bit::second_moment(size_t i) const {
  const State& s = states_.at(i);
  if (!s.quantized) return s.v.view(params_[i].sizes()).clone();
  return dequantize_blockwise({s.v_codes, s.v_absmax, quant_.block_size},
                              DynamicCode::unsigned_code())
      .view(params_[i].sizes());
}

void AdamW8bit::save(torch::serialize::OutputArchive& a) const {
  a.write("kind", torch::tensor(kKind));
  a.write("t", torch::tensor(step_));
  a.write("skipped", torch::tensor(skipped_));
  a.write("block_size", torch::tensor(quant_.block_size));
  a.write("rounding", torch::tensor(static_cast<int64_t>(quant_.rounding)));
  a.write("count", torch::tensor(static_cast<int64_t>(states_.size())));
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    const std::string k = "." + std::to_string(i);
    if (s.quantized) {
      a.write("m_codes" + k, s.m_codes);
      a.write("v_codes" + k, s.v_codes);
      a.write("m_absmax" + k, s.m_absmax);
      a.write("v_absmax" + k, s.v_absmax);
    } else {
      a.write("m" + k, s.m);
      a.write("v" + k, s.v);
    }
  }
}

void AdamW8bit::load(torch::serialize::InputArchive& a) {
  if (read_tensor(a, "kind").item<int64_t>() != kKind)
    throw std::runtime_error(
        "checkpoint holds the state of another optimizer than adamw8bit: use the optimizer it "
        "was trained with");
  const int64_t block_size = read_tensor(a, "block_size").item<int64_t>();
  if (block_size != quant_.block_size)
    throw std::runtime_error("adamw8bit checkpoint uses block_size " + std::to_string(block_size) +
                             ", this optimizer " + std::to_string(quant_.block_size) +
                             ": construct it with the same AdamW8bitOptions");
  if (read_tensor(a, "rounding").item<int64_t>() != static_cast<int64_t>(quant_.rounding))
    throw std::runtime_error(
        "adamw8bit checkpoint uses another rounding mode: construct the "
        "optimizer with the same AdamW8bitOptions");
  const int64_t count = read_tensor(a, "count").item<int64_t>();
  if (count != static_cast<int64_t>(states_.size()))
    throw std::runtime_error("adamw8bit checkpoint holds " + std::to_string(count) +
                             " parameters, the model has " + std::to_string(states_.size()));
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < states_.size(); ++i) {
    State& s = states_[i];
    const std::string k = "." + std::to_string(i);
    if (s.quantized) {
      read_into(a, "m_codes" + k, s.m_codes);
      read_into(a, "v_codes" + k, s.v_codes);
      read_into(a, "m_absmax" + k, s.m_absmax);
      read_into(a, "v_absmax" + k, s.v_absmax);
    } else {
      read_into(a, "m" + k, s.m);
      read_into(a, "v" + k, s.v);
    }
  }
  step_ = read_tensor(a, "t").item<int64_t>();
  skipped_ = read_tensor(a, "skipped").item<int64_t>();
}

std::unique_ptr<AdamW8bit> make_adamw8bit(std::vector<at::Tensor> params, const AdamWOptions& opts,
                                          const AdamW8bitOptions& quant) {
  return std::make_unique<AdamW8bit>(std::move(params), opts, quant);
}

}  // namespace ht
