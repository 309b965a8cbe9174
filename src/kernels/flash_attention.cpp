// FlashAttention-2 on the CPU: score tiles go through GEMMs (fp32: ATen's, OpenBLAS; bf16: oneDNN's
// with fp32 accumulation), the online-softmax bookkeeping through plain fp32 loops; neither pass
// materialises a T x S matrix.
#include "hybrid/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>

#include "kernels/bf16.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"

namespace ht {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t block_q,
                  int64_t block_k) {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("flash_attention: " + what);
  };
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    fail("q, k, v must be [B, nh, T, hs]; got " + std::to_string(q.dim()) + "-d inputs");
  const auto dt = q.scalar_type();
  if ((dt != at::kFloat && dt != at::kBFloat16) || k.scalar_type() != dt || v.scalar_type() != dt)
    fail("q, k, v must all be float32 or all bfloat16 (flash_attention() takes other dtypes)");
  if (!q.device().is_cpu() || !k.device().is_cpu() || !v.device().is_cpu())
    fail("q, k, v must be CPU tensors");
  if (k.sizes() != v.sizes() || q.size(0) != k.size(0) || q.size(1) != k.size(1) ||
      q.size(3) != k.size(3))
    fail("shapes do not match: q [B, nh, T, hs], k and v [B, nh, S, hs]");
  if (q.size(2) < 1 || k.size(2) < 1 || q.size(3) < 1) fail("T, S and hs must be >= 1");
  if (block_q < 1 || block_k < 1) fail("block_q and block_k must be >= 1");
}

// Runs body(item) for item in [0, n) on the OpenMP team with dynamic scheduling (causal tiles make
// items unequal), no autograd in the workers, and the first exception rethrown on the caller.
template <typename Body>
void parallel_items(int64_t n, const Body& body) {
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < n; ++item) {
    try {
      at::NoGradGuard no_grad;
      body(item);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Per-head row access into a [B, nh, L, hs] float or bf16 tensor whose rows are contiguous: rows
// of a head may be any distance apart, so GPT's q, k, v (strided views into the c_attn output) and
// its incoming gradient are used in place; anything else is copied once.
class Heads {
 public:
  explicit Heads(const at::Tensor& x)
      : t_(x.stride(3) == 1 && (x.size(2) == 1 || x.stride(2) >= x.size(3))
               ? x.detach()
               : x.detach().contiguous()),
        nh_(t_.size(1)),
        hs_(t_.size(3)),
        sb_(t_.stride(0)),
        sh_(t_.stride(1)),
        st_(t_.size(2) == 1 ? t_.size(3) : t_.stride(2)),
        data_(t_.data_ptr()),
        elem_(t_.element_size()) {}

  // Rows [r0, r0 + n) of head bh = b * nh + h, as an [n, hs] view (row stride st_).
  at::Tensor rows(int64_t bh, int64_t r0, int64_t n) const {
    return t_.as_strided({n, hs_}, {st_, 1}, t_.storage_offset() + offset(bh, r0));
  }
  float* row(int64_t bh, int64_t r) const {  // float32 tensors only
    return static_cast<float*>(data_) + offset(bh, r);
  }
  const uint16_t* row_bf16(int64_t bh, int64_t r) const {  // bfloat16 tensors only
    return static_cast<const uint16_t*>(data_) + offset(bh, r);
  }
  bool is_bf16() const { return elem_ == 2; }

 private:
  int64_t offset(int64_t bh, int64_t r) const {
    return (bh / nh_) * sb_ + (bh % nh_) * sh_ + r * st_;
  }

  at::Tensor t_;  // detached: the tile GEMMs (out= variants) must not see a tensor requiring grad
  int64_t nh_, hs_, sb_, sh_, st_;
  void* data_;
  int64_t elem_;
};

// Tile GEMMs. fp32 keeps ATen's (OpenBLAS) calls; bf16 operands go to oneDNN's bf16 GEMM, which
// writes and accumulates into the fp32 out.
void tile_mm(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {  // out = a b
  if (a.scalar_type() == at::kFloat) {
    at::mm_out(out, a, b);
  } else {
    matmul_into(out, a, b);
  }
}
void tile_addmm(at::Tensor& acc, const at::Tensor& a, const at::Tensor& b) {  // acc += a b
  if (a.scalar_type() == at::kFloat) {
    acc.addmm_(a, b);
  } else {
    matmul_into(acc, a, b, 1.0f, 1.0f);
  }
}

// An fp32 tile as a GEMM operand of the compute dtype: itself, or rounded into a bf16 buffer.
const at::Tensor& as_operand(const at::Tensor& tile32, at::Tensor& buffer_c) {
  if (!buffer_c.defined()) return tile32;
  buffer_c = buffer_c.as_strided(tile32.sizes(), tile32.strides(), 0);
  round_into(buffer_c, tile32);  // both contiguous [n, m] tiles
  return buffer_c;
}

// An [n, m] contiguous view at the start of a per-thread scratch buffer.
at::Tensor tile(const at::Tensor& buffer, int64_t n, int64_t m) {
  return buffer.as_strided({n, m}, {m, 1}, 0);
}

// Number of keys of a tile row that the causal mask leaves visible: query i (global) sees keys
// 0..i, so a tile starting at key j0 with nk keys shows clamp(i - j0 + 1, 0, nk) of them.
inline int64_t visible_keys(bool causal, int64_t i, int64_t j0, int64_t nk) {
  if (!causal) return nk;
  return std::clamp<int64_t>(i - j0 + 1, 0, nk);
}

// Sum of n floats with 8 independent accumulators, so the compiler can vectorise it.
inline float row_sum(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int u = 0; u < 8; ++u) acc[u] += x[c + u];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; c < n; ++c) s += x[c];
  return s;
}

// Max of scale * x[0..n) with 8 independent lanes; -inf when n == 0.
inline float scaled_row_max(float* x, int64_t n, float scale) {
  float acc[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int u = 0; u < 8; ++u) {
      x[c + u] *= scale;
      acc[u] = std::max(acc[u], x[c + u]);
    }
  float m = std::max(std::max(std::max(acc[0], acc[1]), std::max(acc[2], acc[3])),
                     std::max(std::max(acc[4], acc[5]), std::max(acc[6], acc[7])));
  for (; c < n; ++c) {
    x[c] *= scale;
    m = std::max(m, x[c]);
  }
  return m;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q_in,
                                                           const at::Tensor& k_in,
                                                           const at::Tensor& v_in, bool causal,
                                                           int64_t block_q, int64_t block_k) {
  check_inputs(q_in, k_in, v_in, block_q, block_k);
  const int64_t B = q_in.size(0), nh = q_in.size(1), T = q_in.size(2), hs = q_in.size(3);
  const int64_t S = k_in.size(2), BH = B * nh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const bool bf16 = q_in.scalar_type() == at::kBFloat16;
  const auto f32 = q_in.options().dtype(at::kFloat);
  const Heads q(q_in), k(k_in), v(v_in);
  // y is laid out [B, T, nh, hs] and returned as a [B, nh, T, hs] view, so that GPT's
  // y.transpose(1, 2).reshape({B, T, C}) is free. It is accumulated in fp32 (bf16: in a buffer
  // rounded to bf16 at the end).
  at::Tensor y32 = at::zeros({B, T, nh, hs}, f32);
  const Heads out(y32.permute({0, 2, 1, 3}));              // accumulated in place
  at::Tensor lse = at::empty({B, nh, T}, f32);  // [B, nh, T]
  const int64_t bq = std::min(block_q, T), bk = std::min(block_k, S);
  const int64_t n_qblocks = (T + bq - 1) / bq;
  float* lse_data = lse.data_ptr<float>();

  parallel_items(BH * n_qblocks, [&](int64_t item) {
    const int64_t bh = item / n_qblocks, i0 = (item % n_qblocks) * bq;
    const int64_t nq = std::min(bq, T - i0);
    at::Tensor s_buf = at::empty({bq * bk}, f32);  // one [nq, nk] score tile
    at::Tensor p_buf = bf16 ? at::empty({bq * bk}, q_in.options()) : at::Tensor();  // bf16 copy
    at::Tensor q_i = q.rows(bh, i0, nq);                      // [nq, hs]
    at::Tensor acc = out.rows(bh, i0, nq);                    // [nq, hs], unnormalised output
    float* m = lse_data + bh * T + i0;  // running row max, reused as the lse slot at the end
    std::vector<float> l(nq, 0.0f), correction(nq);
    std::fill(m, m + nq, kNegInf);
    // Causal: key blocks past the last query of this block are fully masked; stop before them.
    const int64_t s_end = causal ? std::min(S, i0 + nq) : S;
    for (int64_t j0 = 0; j0 < s_end; j0 += bk) {
      const int64_t nk = std::min(bk, S - j0);
      at::Tensor s = tile(s_buf, nq, nk);  // [nq, nk]
      tile_mm(s, q_i, k.rows(bh, j0, nk).t());
      float* sd = s.data_ptr<float>();
      for (int64_t r = 0; r < nq; ++r) {
        float* row = sd + r * nk;
        const int64_t vis = visible_keys(causal, i0 + r, j0, nk);
        const float m_new = std::max(m[r], scaled_row_max(row, vis, scale));
        // A row with no visible key yet keeps m = -inf; subtract 0 to avoid -inf - -inf = NaN.
        const float shift = m_new == kNegInf ? 0.0f : m_new;
        for (int64_t c = 0; c < vis; ++c) row[c] -= shift;
        for (int64_t c = vis; c < nk; ++c) row[c] = kNegInf;
        correction[r] = m[r] == kNegInf ? 0.0f : std::exp(m[r] - m_new);
        m[r] = m_new;
      }
      s.exp_();  // p = exp(s - m), vectorised by ATen
      for (int64_t r = 0; r < nq; ++r) {
        l[r] = l[r] * correction[r] + row_sum(sd + r * nk, nk);
        if (correction[r] != 1.0f) {
          float* a = out.row(bh, i0 + r);
          for (int64_t h = 0; h < hs; ++h) a[h] *= correction[r];
        }
      }
      tile_addmm(acc, as_operand(s, p_buf), v.rows(bh, j0, nk));  // acc += p @ v_j
    }
    for (int64_t r = 0; r < nq; ++r) {
      const float inv = 1.0f / l[r];
      float* a = out.row(bh, i0 + r);
      for (int64_t h = 0; h < hs; ++h) a[h] *= inv;
      m[r] += std::log(l[r]);  // lse = m + log(l)
    }
  });
  at::Tensor y = bf16 ? to_bf16(y32) : y32;  // [B, T, nh, hs]
  return {y.permute({0, 2, 1, 3}), lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& dy_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& y_in, const at::Tensor& lse_in, bool causal, int64_t block_q,
    int64_t block_k) {
  check_inputs(q_in, k_in, v_in, block_q, block_k);
  if (dy_in.sizes() != q_in.sizes() || y_in.sizes() != q_in.sizes())
    throw std::invalid_argument("flash_attention_backward: dy and y must have q's shape");
  const int64_t B = q_in.size(0), nh = q_in.size(1), T = q_in.size(2), hs = q_in.size(3);
  const int64_t S = k_in.size(2), BH = B * nh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const auto dt = q_in.scalar_type();
  const bool bf16 = dt == at::kBFloat16;
  const auto f32 = q_in.options().dtype(at::kFloat);
  const Heads q(q_in), k(k_in), v(v_in), y(y_in.to(dt)), dy(dy_in.to(dt));
  const at::Tensor lse = lse_in.detach().contiguous();  // [B, nh, T]
  // Gradients accumulate over tiles in fp32 (bf16: rounded once at the end).
  at::Tensor dq = at::zeros({B, nh, T, hs}, f32);
  at::Tensor dk = at::zeros({B, nh, S, hs}, f32);
  at::Tensor dv = at::zeros({B, nh, S, hs}, f32);
  const Heads dq_h(dq), dk_h(dk), dv_h(dv);
  const int64_t bq = std::min(block_q, T), bk = std::min(block_k, S);

  // One head per work item: dq rows are accumulated over every key block, so two threads never
  // share a head and no atomics are needed. B * nh >= threads in practice (GPT-2: 12 heads).
  parallel_items(BH, [&](int64_t bh) {
    at::Tensor p_buf = at::empty({bq * bk}, f32);
    at::Tensor dp_buf = at::empty({bq * bk}, f32);
    at::Tensor c_buf = bf16 ? at::empty({bq * bk}, q_in.options()) : at::Tensor();  // bf16 tiles
    // D[t] = rowsum(dy * y): the softmax-backward term of FlashAttention-2, in fp32.
    std::vector<float> D(T);
    for (int64_t t = 0; t < T; ++t) {
      float s = 0.0f;
      if (bf16) {
        const uint16_t* dyr = dy.row_bf16(bh, t);
        const uint16_t* yr = y.row_bf16(bh, t);
        for (int64_t h = 0; h < hs; ++h) s += bf16_to_float(dyr[h]) * bf16_to_float(yr[h]);
      } else {
        const float* dyr = dy.row(bh, t);
        const float* yr = y.row(bh, t);
        for (int64_t h = 0; h < hs; ++h) s += dyr[h] * yr[h];
      }
      D[t] = s;
    }
    const float* lse_bh = lse.data_ptr<float>() + bh * T;
    // Views of every query block, made once: tensor views cost about as much as a small GEMM.
    std::vector<at::Tensor> q_blocks, dy_blocks, dq_blocks;  // [nq, hs] each
    for (int64_t i0 = 0; i0 < T; i0 += bq) {
      const int64_t nq = std::min(bq, T - i0);
      q_blocks.push_back(q.rows(bh, i0, nq));
      dy_blocks.push_back(dy.rows(bh, i0, nq));
      dq_blocks.push_back(dq_h.rows(bh, i0, nq));
    }
    for (int64_t j0 = 0; j0 < S; j0 += bk) {
      const int64_t nk = std::min(bk, S - j0);
      at::Tensor k_j = k.rows(bh, j0, nk), v_j = v.rows(bh, j0, nk);  // [nk, hs]
      at::Tensor k_jt = k_j.t(), v_jt = v_j.t();                      // [hs, nk]
      at::Tensor dk_j = dk_h.rows(bh, j0, nk), dv_j = dv_h.rows(bh, j0, nk);  // fp32
      // Causal: query blocks that end before key j0 see none of this block.
      for (int64_t ib = causal ? j0 / bq : 0; ib * bq < T; ++ib) {
        const int64_t i0 = ib * bq, nq = std::min(bq, T - i0);
        const at::Tensor& q_i = q_blocks[ib];
        const at::Tensor& dy_i = dy_blocks[ib];
        at::Tensor p = tile(p_buf, nq, nk), dp = tile(dp_buf, nq, nk);  // [nq, nk] fp32
        tile_mm(p, q_i, k_jt);
        float* pd = p.data_ptr<float>();
        for (int64_t r = 0; r < nq; ++r) {
          float* row = pd + r * nk;
          const int64_t vis = visible_keys(causal, i0 + r, j0, nk);
          const float l = lse_bh[i0 + r];
          for (int64_t c = 0; c < vis; ++c) row[c] = row[c] * scale - l;
          for (int64_t c = vis; c < nk; ++c) row[c] = kNegInf;
        }
        p.exp_();                                           // p = softmax probabilities of this tile
        tile_addmm(dv_j, as_operand(p, c_buf).t(), dy_i);  // dv += p^T dy
        tile_mm(dp, dy_i, v_jt);                            // dp = dy v^T
        float* dpd = dp.data_ptr<float>();
        for (int64_t r = 0; r < nq; ++r) {
          const float d = D[i0 + r];
          for (int64_t c = 0; c < nk; ++c)  // ds = p * (dp - D), with the 1/sqrt(hs) folded in
            dpd[r * nk + c] = pd[r * nk + c] * (dpd[r * nk + c] - d) * scale;
        }
        const at::Tensor& ds = as_operand(dp, c_buf);  // [nq, nk]
        tile_addmm(dq_blocks[ib], ds, k_j);             // dq += ds k
        tile_addmm(dk_j, ds.t(), q_i);                  // dk += ds^T q
      }
    }
  });
  if (!bf16) return {dq, dk, dv};
  return {to_bf16(dq), to_bf16(dk), to_bf16(dv)};
}

namespace {

// Autograd wrapper: saves q, k, v, y and lse (all linear in T) and recomputes tiles in backward.
struct FlashAttentionFunction : public torch::autograd::Function<FlashAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool causal, int64_t block_q,
                            int64_t block_k) {
    auto [y, lse] = flash_attention_forward(q, k, v, causal, block_q, block_k);
    ctx->save_for_backward({q, k, v, y, lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["block_q"] = block_q;
    ctx->saved_data["block_k"] = block_k;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dq, dk, dv] = flash_attention_backward(grads[0], saved[0], saved[1], saved[2], saved[3],
                                                 saved[4], ctx->saved_data["causal"].toBool(),
                                                 ctx->saved_data["block_q"].toInt(),
                                                 ctx->saved_data["block_k"].toInt());
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace {

using FlashFn = at::Tensor (*)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, int64_t block_q, int64_t block_k);

at::Tensor flash_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     int64_t block_q, int64_t block_k) {
  return FlashAttentionFunction::apply(q, k, v, causal, block_q, block_k);
}

// Another device or dtype: ATen's fused attention where LibTorch has it, else the reference.
at::Tensor flash_fallback(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          bool causal, int64_t /*block_q*/, int64_t /*block_k*/) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
#else
  return naive_attention(q, k, v, causal);
#endif
}

const KernelTable<FlashFn> kFlash{"flash_attention", flash_cpu, flash_cpu, flash_fallback};

}  // namespace

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal, int64_t block_q, int64_t block_k) {
  // Shapes and tiles are checked whatever the path; dtype and device pick it.
  if (q.dim() == 4 && k.dim() == 4 && v.dim() == 4) {
    const bool same = k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
                      k.device() == q.device() && v.device() == q.device();
    const KernelPath path = kernel_path(q, same);
    if (path != KernelPath::Fallback) check_inputs(q, k, v, block_q, block_k);
    return kFlash(path, q, k, v, causal, block_q, block_k);
  }
  check_inputs(q, k, v, block_q, block_k);  // throws: not 4-d
  return {};
}

}  // namespace ht
