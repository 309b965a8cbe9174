// GPT-2 (Radford et al. 2019): a pre-LayerNorm decoder-only transformer whose named_parameters()
// match the Hugging Face `gpt2` safetensors checkpoint one to one, in name and in shape.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "hybrid/kernels/attention_core.h"
#include "hybrid/kernels/precision.h"

namespace torch::nn {
class EmbeddingImpl;
class LayerNormImpl;
}  // namespace torch::nn

namespace ht {

struct GPTConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t vocab_size = 256;
  int64_t block_size = 128;  // longest context; wpe has this many rows
  double dropout = 0.0;      // embeddings, attention probabilities, residual branches
  AttentionKind attention = AttentionKind::Naive;  // the attention core (attention.h)
  // Compute precision; not part of the architecture (the same weights train in either).
  // BF16 on the CPU: each block's LayerNorm writes bf16 (fp32 statistics), the linear layers,
  // attention and GELU compute in bf16 with fp32 accumulation and keep bf16 activations for
  // backward, the LM head's GEMMs run in bf16 and its logits, softmax and loss in fp32. The
  // residual stream, the parameters (master weights) and their gradients stay fp32, and so does
  // everything the optimizer sees. BF16 on CUDA: LibTorch's autocast to bf16 around the forward
  // (compiled only with a CUDA LibTorch; untested on a GPU).
  // No loss scaling: bf16 keeps fp32's 8-bit exponent (range ~1e-38..3e38), so small gradients
  // do not underflow as they do in fp16 (5-bit exponent, smallest normal 6e-5), which is what
  // loss scaling corrects. bf16 loses mantissa bits (8 against 24), and scaling cannot restore
  // those; the fp32 accumulation in every GEMM and reduction is what keeps them.
  Precision precision = Precision::FP32;
};

// "tiny" (4 layers, d 128, 4 heads, byte vocab 256, context 128), "gpt2" (124M), "gpt2-medium",
// "gpt2-large", "gpt2-xl". Throws std::invalid_argument listing the valid names.
GPTConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

// One block's forward, x [B, T, C] -> [B, T, C].
using BlockFn = std::function<at::Tensor(const at::Tensor& x)>;
// Runs block `layer` on x. The default simply calls block(x). This is the activation-checkpointing
// seam: a wrapper may run `block` without keeping its activations and call it again in backward.
// `block` only reads parameters and x, so calling it twice gives the same result when dropout = 0.
using BlockRunner =
    std::function<at::Tensor(const BlockFn& block, const at::Tensor& x, int64_t layer)>;

class GPTBlock;

// Parameters (HF GPT-2 names; Conv1D weights are [in, out], so y = x @ W + b):
//   wte.weight [V, C], wpe.weight [block_size, C],
//   h.{i}.ln_1.{weight,bias} [C], h.{i}.attn.c_attn.weight [C, 3C], .bias [3C],
//   h.{i}.attn.c_proj.weight [C, C], .bias [C], h.{i}.ln_2.{weight,bias} [C],
//   h.{i}.mlp.c_fc.weight [C, 4C], .bias [4C], h.{i}.mlp.c_proj.weight [4C, C], .bias [C],
//   ln_f.{weight,bias} [C].
// The LM head is tied: logits = ln_f(h) @ wte^T. No buffers are registered.
class GPT : public torch::nn::Module {
 public:
  // Initialised like GPT-2: N(0, 0.02) weights, residual projections (attn.c_proj, mlp.c_proj)
  // scaled by 1/sqrt(2 n_layer), zero biases, LayerNorm gain 1. Seed with torch::manual_seed.
  explicit GPT(GPTConfig config);

  at::Tensor forward(const at::Tensor& idx);  // [B, T] int64 -> logits [B, T, V] float32
  // [B, T] int64 -> ln_f output [B, T, C], in the compute dtype (bf16 under Precision::BF16 on
  // the CPU).
  at::Tensor hidden(const at::Tensor& idx);
  // Mean cross entropy over B*T of the logits against targets [B, T] int64. The LM head and the
  // loss are fused (lm_head_loss.h): the [B*T, V] logits are never kept for backward.
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets);

  const GPTConfig& config() const { return config_; }
  // All parameters, or without the position embeddings (the count GPT-2 papers quote).
  int64_t num_parameters(bool include_position_embeddings = true) const;

  void set_attention_core(AttentionCore core);  // replaces the one config.attention chose
  // Switches compute precision (e.g. when resuming a checkpoint trained in the other): the
  // parameters are fp32 in both, so nothing is converted.
  void set_precision(Precision precision);
  void set_block_runner(BlockRunner runner);    // empty restores the default (plain call)
  // Selective recompute of each block's MLP: its GELU output is rebuilt in backward, not kept.
  void set_recompute_gelu(bool on);
  const at::Tensor& token_embedding() const;    // wte.weight [V, C], also the LM head

 private:
  void init_weights();
  c10::ScalarType compute_dtype() const;  // of activations: bf16 only for BF16 on the CPU
  bool cuda_autocast() const;             // BF16 on CUDA: autocast around the forward

  GPTConfig config_;
  std::shared_ptr<torch::nn::EmbeddingImpl> wte_;
  std::shared_ptr<torch::nn::EmbeddingImpl> wpe_;
  std::vector<std::shared_ptr<GPTBlock>> blocks_;  // registered as the ModuleList "h"
  std::shared_ptr<torch::nn::LayerNormImpl> ln_f_;
  AttentionCore attention_;
  BlockRunner block_runner_;
};

// Total number of elements over module.parameters().
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace ht
