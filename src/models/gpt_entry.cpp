// GPT-2's registry entry: its settings (preset and overrides, attention kernel, pretrained
// weights), how it is built against the data, its activation-recompute seam and memory model.
#include <cstdio>

#include <torch/torch.h>

#include "hybrid/core/errors.h"
#include "hybrid/core/safetensors.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/attention_core.h"
#include "hybrid/kernels/precision.h"
#include "hybrid/kernels/recompute.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"
#include "hybrid/models/gpt_weights.h"
#include "hybrid/models/model_registry.h"

namespace ht {
namespace {

// Activation recompute for a GPT, replacing whatever was in force: the configured attention
// core, blocks called plainly, then the level's wrappers.
void set_gpt_recompute(GPT& gpt, RecomputeLevel level, int64_t every_n_layers) {
  RecomputePolicy policy;
  policy.level = level;
  policy.every_n_layers = static_cast<int>(every_n_layers);
  policy.validate();
  const int64_t T = gpt.config().block_size;
  const AttentionKind attention = gpt.config().attention;
  gpt.set_attention_core(make_attention_core(attention, T));
  gpt.set_block_runner({});
  gpt.set_recompute_gelu(policy.level == RecomputeLevel::Selective);
  if (policy.level == RecomputeLevel::Selective && attention == AttentionKind::Naive) {
    // The attention core's [T, T] probabilities are the largest activation per block: keep only
    // its input and recompute it in backward. FlashAttention keeps only q, k, v and the row
    // logsumexp already (and fused is ATen's own), so selective changes nothing there.
    AttentionCore naive = make_attention_core(AttentionKind::Naive, T);
    gpt.set_attention_core([naive](const at::Tensor& qkv, int64_t n_head, double p) {
      return recompute([=](const at::Tensor& x) { return naive(x, n_head, p); }, qkv);
    });
  }
  if (policy.level != RecomputeLevel::Full) return;
  // Full: each chosen block keeps only its input; its parameters get their gradients in backward.
  std::vector<std::vector<at::Tensor>> block_params(gpt.config().n_layer);
  for (const auto& kv : gpt.named_parameters()) {
    if (kv.key().rfind("h.", 0) != 0) continue;
    const int64_t layer = std::stoll(kv.key().substr(2, kv.key().find('.', 2) - 2));
    block_params[layer].push_back(kv.value());
  }
  gpt.set_block_runner([policy, block_params](const BlockFn& block, const at::Tensor& x, int64_t layer) {
    if (!policy.recompute_block(static_cast<int>(layer))) return block(x);
    return recompute(block, x, block_params[layer]);
  });
}

}  // namespace

GPTConfig gpt_config(const ModelSettings& s) {
  GPTConfig g = gpt_preset(s.get_string("preset"));
  auto override_if_set = [&](const char* key, int64_t& field) {
    if (const int64_t v = s.get_int(key); v > 0) field = v;  // 0 keeps the preset's value
  };
  override_if_set("n_layer", g.n_layer);
  override_if_set("n_head", g.n_head);
  override_if_set("n_embd", g.n_embd);
  override_if_set("block_size", g.block_size);
  override_if_set("vocab_size", g.vocab_size);
  if (g.n_embd % g.n_head != 0)
    throw OptionsError("GPT: n_embd (" + std::to_string(g.n_embd) + ") must be divisible by n_head (" +
                       std::to_string(g.n_head) + ")");
  try {
    g.attention = parse_attention_kind(s.get_string("attention"));
  } catch (const std::invalid_argument& e) {
    throw OptionsError(std::string("ModelSettings.attention: ") + e.what());
  }
  if (const std::string why = attention_unavailable_reason(g.attention); !why.empty())
    throw OptionsError("ModelSettings.attention = " + to_string(g.attention) + ": " + why);
  return g;
}

ModelSpec gpt_model_spec() {
  ModelSpec s;
  s.name = "gpt";
  s.help = "GPT-2 (any size, Hugging Face names and safetensors weights) on text";
  s.data = DataKind::Tokens;
  s.bf16 = true;
  s.keys = {
      {"preset", false, "tiny", gpt_preset_names(), 0, 0, "GPT size"},
      {"n_layer", true, "0", {}, 0, 1024, "override the preset's layers (0 = preset)"},
      {"n_head", true, "0", {}, 0, 1024, "override the preset's heads (0 = preset)"},
      {"n_embd", true, "0", {}, 0, 1 << 16, "override the preset's width (0 = preset)"},
      {"block_size", true, "0", {}, 0, 1e6, "override the preset's context (0 = preset)"},
      {"vocab_size", true, "0", {}, 0, 1 << 24, "override the vocabulary (0 = preset, 256 for byte data)"},
      {"init_from", false, "", {}, 0, 0, "GPT-2 safetensors file to start from"},
      {"attention", false, "naive", {"naive", "flash", "fused"}, 0, 0,
       "attention kernel (fused: ATen's scaled_dot_product_attention, LibTorch >= 2.0)"},
  };
  s.build = [](const ModelSettings& settings, const DataShape& data, const BuildOptions& options) {
    GPTConfig g = gpt_config(settings);
    g.precision = options.precision;
    if (data.vocab_size > g.vocab_size)
      throw OptionsError("GPT: the data has " + std::to_string(data.vocab_size) + " token ids but the vocabulary is " +
                         std::to_string(g.vocab_size) + ": raise vocab_size");
    if (data.context > g.block_size)
      throw OptionsError("GPT: the data's context (" + std::to_string(data.context) + ") exceeds block_size (" +
                         std::to_string(g.block_size) + "): lower the context or raise block_size");
    std::shared_ptr<GPT> gpt;
    try {
      gpt = std::make_shared<GPT>(g);
    } catch (const std::invalid_argument& e) {
      throw OptionsError(std::string("GPT: ") + e.what());
    }
    const std::string init = settings.get_string("init_from");
    if (options.pretrained && !init.empty()) {
      try {
        load_gpt2_weights(*gpt, init);
      } catch (const SafetensorsError& e) {
        throw CheckpointError(std::string("init_from: ") + e.what());
      }
    }
    BuiltModel b;
    b.module = gpt;
    b.objective = make_gpt_objective(gpt);
    char summary[200];
    std::snprintf(summary, sizeof summary,
                  "gpt %s: %lld layers, %lld heads, d %lld, vocab %lld, context %lld, %.2fM parameters, "
                  "attention %s, precision %s",
                  settings.get_string("preset").c_str(), static_cast<long long>(g.n_layer),
                  static_cast<long long>(g.n_head), static_cast<long long>(g.n_embd),
                  static_cast<long long>(g.vocab_size), static_cast<long long>(g.block_size),
                  static_cast<double>(gpt->num_parameters()) / 1e6, to_string(g.attention).c_str(),
                  to_string(g.precision).c_str());
    b.summary = summary;
    GPT* raw = gpt.get();  // the module outlives the hook: both belong to the run
    b.set_recompute = [raw](RecomputeLevel level, int64_t every) { set_gpt_recompute(*raw, level, every); };
    b.architecture = "gpt2";
    b.n_head = g.n_head;
    b.muon.lookup_tables = {"wte.weight", "wpe.weight"};
    for (int64_t i = 0; i < g.n_layer; ++i) {  // c_attn.weight [C, 3C]: columns q | k | v
      const std::string c_attn = "h." + std::to_string(i) + ".attn.c_attn.weight";
      b.attention_map_slices.push_back({c_attn, 1, 0, 2 * g.n_embd});
      b.muon.fused.push_back({c_attn, 3});
    }
    return b;
  };
  s.estimate = [](const ModelSettings& settings, const TrainShape& shape, const MemoryLevers& levers) {
    return estimate_gpt_memory(gpt_config(settings), shape, levers);
  };
  return s;
}

}  // namespace ht
