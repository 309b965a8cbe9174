// Builds model, objective, data and optimizer from a Config. Config keys are read here and in
// trainer_options() only, so what a key does is visible in one file.
#include "session.h"

#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <torch/torch.h>

#include "hybrid/core/checkpoint_file.h"
#include "hybrid/dist/data_parallel.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/data/fashion_mnist.h"
#include "hybrid/hybrid/lookahead.h"
#include "hybrid/hybrid/predictor_registry.h"
#include "hybrid/hybrid/strategy.h"
#include "hybrid/kernels/adamw8bit.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/recompute.h"
#include "hybrid/kernels/attention_core.h"
#include "hybrid/data/kjv.h"
#include "hybrid/data/text_source.h"
#include "hybrid/data/token_corpus.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"
#include "hybrid/models/gpt_weights.h"
#include "hybrid/models/image_classifier.h"
#include "hybrid/core/safetensors.h"

namespace ht::cli {
namespace {

bool is_text_data(const std::string& dataset) { return dataset != "fashion-mnist"; }

std::unique_ptr<DataSource> build_data(const Config& c, Session& s) {
  const std::string dataset = c.get_string("data.dataset");
  const int64_t batch = c.get_int("data.batch_size");
  const auto seed = static_cast<uint64_t>(c.get_int("run.seed"));
  const int64_t val_batches = std::max<int64_t>(0, c.get_int("data.val_batches"));  // -1 (all): 0
  try {
    if (dataset == "fashion-mnist") {
      FashionMnistSplit split;
      split.max_val_batches = val_batches;
      auto src = std::make_unique<FashionMnistSource>(c.get_string("data.fashion_mnist_dir"), batch, seed, split);
      s.data_summary = fmt::format("fashion-mnist: {} train / {} validation images, batch {}",
                                   src->num_train(), src->num_val(), batch);
      return src;
    }
    TokenCorpus corpus = [&] {
      if (dataset == "kjv") return load_kjv();
      const std::string path = c.get_string("data.path");
      if (path.empty())
        throw ConfigError("data.dataset = " + dataset + " needs data.path (a " +
                          (dataset == "text" ? "UTF-8 text file" : "file of uint16 token ids") + ")");
      return dataset == "text" ? TokenCorpus::from_text_file(path) : TokenCorpus::from_token_file(path);
    }();
    s.byte_level = dataset != "tokens";
    const int64_t context = c.get_int("data.context");
    auto src = std::make_unique<TextSource>(std::move(corpus), batch, context, seed,
                                            c.get_float("data.val_fraction"), val_batches);
    s.data_summary = fmt::format("{}: {:.2f}M train / {:.2f}M validation tokens, vocab {}, batch {} x {}",
                                 dataset, src->num_train_tokens() / 1e6, src->num_val_tokens() / 1e6,
                                 src->vocab_size(), batch, context);
    return src;
  } catch (const ConfigError&) {
    throw;
  } catch (const c10::OutOfMemoryError&) {
    throw;  // a memory budget too small for the data set is no data error (exit 5, not 3)
  } catch (const std::exception& e) {
    throw DataError(e.what());
  }
}

std::unique_ptr<Optimizer> build_optimizer(const Config& c, std::vector<at::Tensor> params,
                                           dist::ProcessGroup* group) {
  const std::string name = c.get_string("optim.name");
  if (group && c.get_bool("dist.shard_optimizer") && name != "adamw")
    throw ConfigError("dist.shard_optimizer = true shards AdamW's moments; optim.name = " + name +
                      " is not supported with it: use optim.name = adamw or dist.shard_optimizer = false");
  try {
    if (name == "sgd") {
      SgdOptions o;
      o.lr = c.get_float("optim.lr");
      o.momentum = c.get_float("optim.momentum");
      o.weight_decay = c.get_float("optim.weight_decay");
      return make_sgd(std::move(params), o);
    }
    AdamWOptions o;
    o.lr = c.get_float("optim.lr");
    o.beta1 = c.get_float("optim.beta1");
    o.beta2 = c.get_float("optim.beta2");
    o.eps = c.get_float("optim.eps");
    o.weight_decay = c.get_float("optim.weight_decay");
    if (name == "adamw8bit") return make_adamw8bit(std::move(params), o);
    if (group && c.get_bool("dist.shard_optimizer"))
      return dist::make_zero_adamw(std::move(params), o, *group, static_cast<int64_t>(c.get_float("dist.bucket_mb") * 1048576.0));
    return make_adamw(std::move(params), o);
  } catch (const std::invalid_argument& e) {
    throw config_error(e);
  }
}

// The GPT attention seam with the tiled FlashAttention kernel: qkv [B, T, 3C] -> y [B, T, C].
AttentionCore flash_attention_core() {
  return [](const at::Tensor& qkv, int64_t n_head, double /*dropout_p*/) {
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
    auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
    const auto parts = qkv.split(C, 2);                                              // 3 x [B, T, C]
    at::Tensor y = flash_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true);  // [B, nh, T, hs]
    return y.transpose(1, 2).reshape({B, T, C});
  };
}

}  // namespace

GPTConfig gpt_config(const Config& c) {
  GPTConfig g = gpt_preset(c.get_string("model.preset"));
  auto override_if_set = [&](const char* key, int64_t& field) {
    if (const int64_t v = c.get_int(key); v > 0) field = v;  // 0 keeps the preset's value
  };
  override_if_set("model.n_layer", g.n_layer);
  override_if_set("model.n_head", g.n_head);
  override_if_set("model.n_embd", g.n_embd);
  override_if_set("model.block_size", g.block_size);
  override_if_set("model.vocab_size", g.vocab_size);
  if (g.n_embd % g.n_head != 0)
    throw ConfigError(fmt::format("model.n_embd ({}) must be divisible by model.n_head ({})", g.n_embd, g.n_head));
  return g;
}

bool set_recompute(Session& s, const std::string& level, int64_t every_n_layers) {
  if (!s.gpt) return false;
  RecomputePolicy policy;
  policy.level = parse_recompute_level(level);
  policy.every_n_layers = static_cast<int>(every_n_layers);
  policy.validate();
  const int64_t T = s.gpt->config().block_size;
  s.recompute = to_string(policy.level);
  // Start from no recompute: the configured attention core, blocks called plainly.
  s.gpt->set_attention_core(s.flash_attention ? flash_attention_core()
                                             : make_attention_core(s.gpt->config().attention, T));
  s.gpt->set_block_runner({});
  s.gpt->set_recompute_gelu(policy.level == RecomputeLevel::Selective);
  if (policy.level == RecomputeLevel::Selective && !s.flash_attention) {
    // The attention core's [T, T] probabilities are the largest activation per block: keep only
    // its input and recompute it in backward. FlashAttention keeps only q, k, v and the row
    // logsumexp already, so selective changes nothing there.
    AttentionCore naive = make_attention_core("naive", T);
    s.gpt->set_attention_core([naive](const at::Tensor& qkv, int64_t n_head, double p) {
      return recompute([=](const at::Tensor& x) { return naive(x, n_head, p); }, qkv);
    });
  }
  if (policy.level != RecomputeLevel::Full) return true;
  // Full: each chosen block keeps only its input; its parameters get their gradients in backward.
  std::vector<std::vector<at::Tensor>> block_params(s.gpt->config().n_layer);
  for (const auto& kv : s.gpt->named_parameters()) {
    if (kv.key().rfind("h.", 0) != 0) continue;
    const int64_t layer = std::stoll(kv.key().substr(2, kv.key().find('.', 2) - 2));
    block_params[layer].push_back(kv.value());
  }
  s.gpt->set_block_runner([policy, block_params](const BlockFn& block, const at::Tensor& x, int64_t layer) {
    if (!policy.recompute_block(static_cast<int>(layer))) return block(x);
    return recompute(block, x, block_params[layer]);
  });
  return true;
}

std::string recompute_for_phase(const Config& c, const std::string& phase) {
  const std::string& level = c.get_string("memory.recompute_" + phase);
  return level == "inherit" ? c.get_string("memory.recompute") : level;
}

void set_recompute_hooks(Session& s, const Config& c, TrainerOptions& options) {
  options.memory.on_phase = [&s, &c](Phase phase) {
    if (!s.recompute_forced) set_recompute(s, recompute_for_phase(c, phase_name(phase)), c.get_int("memory.recompute_every"));
  };
  options.memory.enable_recompute = [&s, &c] {
    if (s.recompute_forced || (s.recompute == "full" && c.get_int("memory.recompute_every") == 1)) return false;
    if (!set_recompute(s, "full", 1)) return false;
    s.recompute_forced = true;
    return true;
  };
}

Session build_session(const Config& c, bool with_data, bool load_init_from, dist::ProcessGroup* group) {
  Session s;
  torch::manual_seed(static_cast<uint64_t>(c.get_int("run.seed")));
  const std::string kind = c.get_string("model.kind");
  const std::string dataset = c.get_string("data.dataset");
  if ((kind == "gpt") != is_text_data(dataset))
    throw ConfigError("model.kind = " + kind + " does not fit data.dataset = " + dataset +
                      " (gpt trains on kjv/text/tokens; mlp and cnn on fashion-mnist)");
  if (with_data) s.data = build_data(c, s);
  if (with_data && group) {
    const int64_t batch = c.get_int("data.batch_size");
    if (batch < group->world_size())
      throw ConfigError(fmt::format("data.batch_size ({}) is the global batch, shared by {} processes: it must be at "
                                    "least the number of processes", batch, group->world_size()));
  }

  if (kind == "gpt") {
    GPTConfig g = gpt_config(c);
    if (auto* text = dynamic_cast<TextSource*>(s.data.get())) {
      if (text->vocab_size() > g.vocab_size)
        throw ConfigError(fmt::format("the data has {} token ids but the model's vocabulary is {}: set model.vocab_size",
                                      text->vocab_size(), g.vocab_size));
      if (text->context() > g.block_size)
        throw ConfigError(fmt::format("data.context ({}) exceeds the model's block_size ({}): lower data.context or set model.block_size",
                                      text->context(), g.block_size));
    }
    s.gpt = std::make_shared<GPT>(g);
    s.flash_attention = c.get_string("model.attention") == "flash";
    // Flash has no attention dropout; the GPT presets here train with dropout 0.
    if (s.flash_attention) s.gpt->set_attention_core(flash_attention_core());
    const std::string first_phase = c.get_string("run.mode") == "hybrid" ? "warmup" : "full";
    if (recompute_for_phase(c, first_phase) != "none")
      set_recompute(s, recompute_for_phase(c, first_phase), c.get_int("memory.recompute_every"));
    const std::string init = c.get_string("model.init_from");
    if (!init.empty() && load_init_from) {
      try {
        load_gpt2_weights(*s.gpt, init);
      } catch (const SafetensorsError& e) {
        throw CheckpointError(std::string("model.init_from: ") + e.what());
      }
    }
    s.module = s.gpt;
    s.objective = make_gpt_objective(s.gpt);
    s.model_summary = fmt::format("gpt {}: {} layers, {} heads, d {}, vocab {}, context {}, {:.2f}M parameters",
                                  c.get_string("model.preset"), g.n_layer, g.n_head, g.n_embd, g.vocab_size,
                                  g.block_size, s.gpt->num_parameters() / 1e6);
    if (dataset == "tokens") s.byte_level = false;
  } else {
    auto model = make_image_classifier(kind);
    s.module = model;
    s.objective = make_image_classifier_objective(model);
    s.model_summary = fmt::format("{}: {:.3f}M parameters", kind, count_parameters(*model) / 1e6);
  }
  s.optimizer = build_optimizer(c, s.module->parameters(), group);
  if (with_data && group) {
    auto shard = std::make_unique<dist::ShardedData>(std::move(s.data), group->rank(), group->world_size());
    s.shard = shard.get();
    s.data = std::move(shard);
  }
  return s;
}

void set_data_parallel(Session& s, const Config& c, dist::ProcessGroup& group, TrainerOptions& options, Logger* logger) {
  if (!s.shard) throw std::logic_error("set_data_parallel: the session was built without the process group");
  dist::DataParallelOptions o;
  o.bucket_bytes = static_cast<int64_t>(c.get_float("dist.bucket_mb") * 1048576.0);
  o.first_bucket_bytes = static_cast<int64_t>(c.get_float("dist.first_bucket_mb") * 1048576.0);
  o.overlap = c.get_bool("dist.overlap");
  o.checksum_every = c.get_int("dist.checksum_every");
  o.seed = static_cast<uint64_t>(c.get_int("run.seed"));
  options.parallel = dist::make_data_parallel(group, *s.module, *s.optimizer, *s.shard, o, logger);
}

HybridOptions hybrid_options(const Config& c) {
  HybridOptions h;
  h.predictor = c.get_string("hybrid.predictor");
  h.warmup_steps = c.get_int("hybrid.warmup_steps");
  h.full_steps = c.get_int("hybrid.full_steps");
  h.correct_steps = c.get_int("hybrid.correct_steps");
  h.min_predict_steps = c.get_int("hybrid.min_predict_steps");
  h.max_predict_steps = c.get_int("hybrid.max_predict_steps");
  h.verify = parse_verify(c.get_string("hybrid.verify"));
  h.verify_every = c.get_int("hybrid.verify_every");
  h.probe_batches = c.get_int("hybrid.probe_batches");
  h.tolerance = c.get_float("hybrid.tolerance");
  h.min_step_worth = c.get_float("hybrid.min_step_worth");
  h.max_step_scale = c.get_float("hybrid.max_step_scale");
  for (const auto& spec : predictor_registry())
    for (const auto& option : spec.options) h.predictor_options[option.key] = c.get_float("hybrid." + option.key);
  h.pay_check = c.get_bool("hybrid.pay_check");
  h.pay_check_clock = parse_clock(c.get_string("hybrid.pay_check_clock"));
  h.seed = static_cast<uint64_t>(c.get_int("run.seed"));
  try {
    h.validate();
  } catch (const std::invalid_argument& e) {
    throw config_error(e);
  }
  return h;
}

std::unique_ptr<StepStrategy> build_strategy(const Config& c) {
  const std::string mode = c.get_string("run.mode");
  if (mode == "lookahead") {
    return make_lookahead_strategy(c.get_int("lookahead.k"), c.get_float("lookahead.alpha"),
                                   c.get_float("lookahead.momentum"));
  }
  if (mode != "hybrid") return nullptr;
  return make_hybrid_strategy(hybrid_options(c));
}

ConfigError config_error(const std::exception& library_error) {
  // Fields named like their keys: AdamWOptions.beta1 is optim.beta1, HybridOptions.full_steps is
  // hybrid.full_steps.
  static const std::pair<const char*, const char*> prefixes[] = {
      {"AdamWOptions.", "optim."}, {"SgdOptions.", "optim."}, {"HybridOptions.", "hybrid."}};
  std::string text = library_error.what();
  for (const auto& [from, to] : prefixes)
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at))
      text.replace(at, std::strlen(from), to);
  return ConfigError(text);
}

std::string checkpoint_dir(const Config& c) {
  return (std::filesystem::path(c.get_string("run.out_dir")) / "checkpoints").string();
}

TrainerOptions trainer_options(const Config& c) {
  TrainerOptions o;
  o.max_steps = c.get_int("train.steps");
  o.grad_accum = c.get_int("optim.grad_accum");
  o.grad_clip = c.get_float("optim.grad_clip");
  o.eval_every = c.get_int("train.eval_every");
  o.eval_batches = c.get_int("data.val_batches");
  o.schedule.kind = parse_schedule_kind(c.get_string("schedule.kind"));
  o.schedule.warmup_steps = c.get_int("schedule.warmup_steps");
  o.schedule.total_steps = o.max_steps;
  o.schedule.min_lr_ratio = c.get_float("schedule.min_lr_ratio");
  o.checkpoint.dir = checkpoint_dir(c);
  o.checkpoint.every_steps = c.get_int("checkpoint.every_steps");
  o.checkpoint.every_seconds = c.get_float("checkpoint.every_seconds");
  o.checkpoint.keep_last = static_cast<int>(c.get_int("checkpoint.keep_last"));
  o.memory.budget_bytes = c.get_bytes("memory.budget");
  o.memory.warn_fraction = c.get_float("memory.warn_fraction");
  o.memory.critical_fraction = c.get_float("memory.critical_fraction");
  o.average_decay = c.get_float("train.average_decay");
  o.config_text = c.to_toml();
  // Each key's own range is checked by the schema (config_schema.cpp); here only what relates keys.
  if (!(o.memory.critical_fraction >= o.memory.warn_fraction))
    throw ConfigError("memory.critical_fraction must be in [memory.warn_fraction, 1], a share of memory.budget");
  return o;
}

}  // namespace ht::cli
