// GPT-2 model: embeddings, the stack of blocks (through the BlockRunner seam), final LayerNorm
// and the tied LM head; GPT-2 initialisation and the named presets.
#include "hybrid/models/gpt.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "gpt_block.h"
#include "hybrid/kernels/lm_head_loss.h"
#include "kernels/layer_norm.h"

#ifdef HT_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <torch/version.h>
#endif

namespace ht {
namespace {

struct Preset {
  const char* name;
  GPTConfig config;
};

GPTConfig make_config(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab,
                      int64_t ctx) {
  GPTConfig c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.vocab_size = vocab;
  c.block_size = ctx;
  return c;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"tiny", make_config(4, 4, 128, 256, 128)},
      {"gpt2", make_config(12, 12, 768, 50257, 1024)},
      {"gpt2-medium", make_config(24, 16, 1024, 50257, 1024)},
      {"gpt2-large", make_config(36, 20, 1280, 50257, 1024)},
      {"gpt2-xl", make_config(48, 25, 1600, 50257, 1024)},
  };
  return all;
}

void check_config(const GPTConfig& c) {
  if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.vocab_size < 1 || c.block_size < 1) {
    throw std::invalid_argument("GPTConfig: n_layer, n_head, n_embd, vocab_size and block_size "
                                "must all be positive");
  }
  if (c.n_embd % c.n_head != 0) {
    throw std::invalid_argument("GPTConfig: n_embd (" + std::to_string(c.n_embd) +
                                ") must be divisible by n_head (" + std::to_string(c.n_head) +
                                ")");
  }
  if (c.dropout < 0.0 || c.dropout >= 1.0) {
    throw std::invalid_argument("GPTConfig: dropout must lie in [0, 1), got " +
                                std::to_string(c.dropout));
  }
  if (c.dropout > 0.0 && c.attention == AttentionKind::Flash) {
    throw std::invalid_argument("GPTConfig: attention flash has no attention dropout; dropout " +
                                std::to_string(c.dropout) + " needs attention naive or fused");
  }
}

#ifdef HT_WITH_CUDA
// Precision::BF16 on CUDA: LibTorch's autocast to bf16 for the life of the guard (our kernels'
// CUDA entries are plain ATen ops, which autocast sees). Untested on a GPU: written against the
// 1.13 and 2.x autocast headers and compiled only when LibTorch has CUDA.
class CudaBf16Autocast {
 public:
  explicit CudaBf16Autocast(bool on) : on_(on) {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    was_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    was_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
    was_enabled_ = at::autocast::is_enabled();
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
    at::autocast::increment_nesting();
  }
  ~CudaBf16Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, was_dtype_);
#else
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
#endif
  }
  CudaBf16Autocast(const CudaBf16Autocast&) = delete;
  CudaBf16Autocast& operator=(const CudaBf16Autocast&) = delete;

 private:
  bool on_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kHalf;
};
#endif

}  // namespace

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

GPTConfig gpt_preset(const std::string& name) {
  for (const auto& p : presets()) {
    if (name == p.name) return p.config;
  }
  std::string valid;
  for (const auto& n : gpt_preset_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown GPT preset '" + name + "'; valid presets: " + valid);
}

GPT::GPT(GPTConfig config) : config_(std::move(config)) {
  check_config(config_);
  const int64_t C = config_.n_embd;
  wte_ = register_module("wte", torch::nn::Embedding(config_.vocab_size, C));
  wpe_ = register_module("wpe", torch::nn::Embedding(config_.block_size, C));
  torch::nn::ModuleList h;
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    blocks_.push_back(std::make_shared<GPTBlock>(C, config_.n_head));
    h->push_back(blocks_.back());
  }
  register_module("h", h);
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
  attention_ = make_attention_core(config_.attention, config_.block_size);
  set_precision(config_.precision);
  init_weights();
}

void GPT::init_weights() {
  torch::NoGradGuard no_grad;
  const double std = 0.02;
  const double resid_std = std / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  wte_->weight.normal_(0.0, std);
  wpe_->weight.normal_(0.0, std);
  for (auto& b : blocks_) {
    b->ln_1->weight.fill_(1.0);
    b->ln_1->bias.zero_();
    b->ln_2->weight.fill_(1.0);
    b->ln_2->bias.zero_();
    b->attn->c_attn->weight.normal_(0.0, std);
    b->attn->c_attn->bias.zero_();
    b->attn->c_proj->weight.normal_(0.0, resid_std);
    b->attn->c_proj->bias.zero_();
    b->mlp->c_fc->weight.normal_(0.0, std);
    b->mlp->c_fc->bias.zero_();
    b->mlp->c_proj->weight.normal_(0.0, resid_std);
    b->mlp->c_proj->bias.zero_();
  }
  ln_f_->weight.fill_(1.0);
  ln_f_->bias.zero_();
}

c10::ScalarType GPT::compute_dtype() const {
  // bf16 activations only where our CPU kernels run; CUDA takes bf16 from autocast instead.
  const bool cpu = wte_->weight.device().is_cpu();
  return config_.precision == Precision::BF16 && cpu ? c10::kBFloat16 : c10::kFloat;
}

bool GPT::cuda_autocast() const {
  return config_.precision == Precision::BF16 && wte_->weight.device().is_cuda();
}

at::Tensor GPT::hidden(const at::Tensor& idx) {
  TORCH_CHECK(idx.dim() == 2 && idx.scalar_type() == at::kLong,
              "GPT: expected token ids [B, T] int64, got ", idx.scalar_type(), " ", idx.sizes());
  const int64_t T = idx.size(1);
  TORCH_CHECK(T >= 1 && T <= config_.block_size, "GPT: sequence length ", T,
              " is outside [1, block_size = ", config_.block_size, "]");
#ifdef HT_WITH_CUDA
  CudaBf16Autocast autocast(cuda_autocast());
#endif
  const double p = is_training() ? config_.dropout : 0.0;
  const c10::ScalarType compute = compute_dtype();
  auto x = at::embedding(wte_->weight, idx) + wpe_->weight.narrow(0, 0, T);  // [B, T, C] fp32
  if (p > 0.0) x = at::dropout(x, p, /*train=*/true);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    GPTBlock& block = *blocks_[i];
    const AttentionCore& core = attention_;
    BlockFn fn = [&block, &core, p, compute](const at::Tensor& in) {
      return block.forward(in, core, p, compute);
    };
    x = block_runner_ ? block_runner_(fn, x, static_cast<int64_t>(i)) : fn(x);
  }
  return layer_norm_to(x, ln_f_->weight, ln_f_->bias, ln_f_->options.eps(), compute);  // [B, T, C]
}

at::Tensor GPT::forward(const at::Tensor& idx) {
#ifdef HT_WITH_CUDA
  CudaBf16Autocast autocast(cuda_autocast());
#endif
  const auto h = hidden(idx);  // [B, T, C]
  if (h.scalar_type() == wte_->weight.scalar_type()) return at::matmul(h, wte_->weight.t());
  // bf16 head: a bf16 GEMM with fp32 accumulation, logits handed out in fp32 for sampling.
  return at::matmul(h, wte_->weight.to(h.scalar_type()).t()).to(at::kFloat);  // [B, T, V]
}

at::Tensor GPT::loss(const at::Tensor& idx, const at::Tensor& targets) {
  TORCH_CHECK(targets.sizes() == idx.sizes(), "GPT::loss: targets ", targets.sizes(),
              " must have the shape of the input ", idx.sizes());
#ifdef HT_WITH_CUDA
  CudaBf16Autocast autocast(cuda_autocast());
#endif
  const auto h = hidden(idx);  // [B, T, C]
  // fp32 loss whatever the compute dtype (lm_head_loss.h).
  return lm_head_cross_entropy(h.view({-1, config_.n_embd}), wte_->weight, targets.reshape({-1}));
}

int64_t GPT::num_parameters(bool include_position_embeddings) const {
  const int64_t n = count_parameters(*this);
  return include_position_embeddings ? n : n - wpe_->weight.numel();
}

void GPT::set_attention_core(AttentionCore core) {
  TORCH_CHECK(static_cast<bool>(core), "GPT::set_attention_core: empty function");
  attention_ = std::move(core);
}

void GPT::set_precision(Precision precision) { config_.precision = precision; }

void GPT::set_block_runner(BlockRunner runner) { block_runner_ = std::move(runner); }

void GPT::set_recompute_gelu(bool on) {
  for (auto& b : blocks_) b->mlp->recompute_gelu = on;
}

const at::Tensor& GPT::token_embedding() const { return wte_->weight; }

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace ht
