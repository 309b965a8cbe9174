// Builds model, objective, data and optimizer from a Config. Config keys are read here and in
// trainer_options() only, so what a key does is visible in one file.
#include "session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/torch.h>

#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/update_scale.h"
#include "hybrid/dist/data_parallel.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/data/fashion_mnist.h"
#include "hybrid/hybrid/lookahead.h"
#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "hybrid/hybrid/predictor_registry.h"
#include "hybrid/hybrid/strategy.h"
#include "hybrid/kernels/adamw8bit.h"
#include "hybrid/kernels/muon.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/recompute.h"
#include "hybrid/kernels/attention_core.h"
#include "hybrid/kernels/precision.h"
#include "hybrid/data/kjv.h"
#include "hybrid/data/text_source.h"
#include "hybrid/data/token_corpus.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"
#include "hybrid/models/gpt_weights.h"
#include "hybrid/models/image_classifier.h"
#include "hybrid/models/model_registry.h"
#include "hybrid/core/safetensors.h"

namespace ht::cli {
namespace {

std::unique_ptr<DataSource> build_data(const Config& c, Session& s) {
  const std::string dataset = c.get_string("data.dataset");
  const int64_t batch = c.get_int("data.batch_size");
  const auto seed = static_cast<uint64_t>(c.get_int("run.seed"));
  const int64_t val_batches = std::max<int64_t>(0, c.get_int("data.val_batches"));  // -1 (all): 0
  try {
    if (dataset == "fashion-mnist") {
      auto images = load_fashion_mnist(c.get_string("data.fashion_mnist_dir"));
      FashionMnistSplit split;
      split.max_val_batches = val_batches;
      split.probe_holdout = std::llround(static_cast<double>(images->train.size()) * c.get_float("data.probe_fraction"));
      auto src = std::make_unique<FashionMnistSource>(std::move(images), batch, seed, split);
      s.data_summary = fmt::format("fashion-mnist: {} train / {} validation images{}, batch {}", src->num_train(),
                                   src->num_val(), src->num_probe() > 0 ? fmt::format(" / {} probe", src->num_probe()) : "",
                                   batch);
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
    auto src = std::make_unique<TextSource>(std::move(corpus), batch, context, seed, c.get_float("data.val_fraction"),
                                            val_batches, c.get_float("data.probe_fraction"));
    s.data_summary = fmt::format("{}: {:.2f}M train / {:.2f}M validation{} tokens, vocab {}, batch {} x {}", dataset,
                                 src->num_train_tokens() / 1e6, src->num_val_tokens() / 1e6,
                                 src->num_probe_tokens() > 0 ? fmt::format(" / {:.2f}M probe", src->num_probe_tokens() / 1e6) : "",
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

// Muon's split: every matrix and conv kernel is orthogonalized except the model's lookup tables
// (and, when hidden_only, its input and output layers), which take AdamW's step; a fused weight is
// orthogonalized per column block when split_fused.
std::vector<MuonParam> muon_params(const torch::nn::Module& module, const MuonLayout& layout, bool split_fused,
                                   bool hidden_only) {
  std::map<std::string, int64_t> blocks;  // name -> column blocks (1: orthogonalized whole, 0: AdamW)
  for (const auto& name : layout.lookup_tables) blocks[name] = 0;
  if (hidden_only)
    for (const auto& name : layout.input_output) blocks[name] = 0;
  for (const auto& fused : layout.fused) blocks[fused.name] = split_fused ? fused.blocks : 1;
  std::vector<MuonParam> out;
  for (const auto& item : module.named_parameters()) {
    auto it = blocks.find(item.key());
    const int64_t b = it == blocks.end() ? 1 : it->second;
    if (it != blocks.end()) blocks.erase(it);
    out.push_back({item.value(), item.value().dim() >= 2 && b > 0, std::max<int64_t>(b, 1)});
  }
  if (!blocks.empty())  // the model's entry and its parameter names disagree: a bug, not bad input
    throw std::logic_error("muon_params: the model's MuonLayout names '" + blocks.begin()->first +
                           "', which the module does not have");
  return out;
}

std::unique_ptr<Optimizer> build_optimizer(const Config& c, const torch::nn::Module& module, const MuonLayout& muon,
                                           dist::ProcessGroup* group) {
  std::vector<at::Tensor> params = module.parameters();
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
    if (name == "muon") {
      MuonOptions m;
      m.adamw = o;
      m.momentum = c.get_float("optim.muon_momentum");
      m.ns_steps = c.get_int("optim.muon_ns_steps");
      m.ns_bf16 = c.get_string("optim.muon_precision") == "bf16";
      return make_muon(muon_params(module, muon, c.get_bool("optim.muon_split_qkv"), c.get_bool("optim.muon_hidden_only")),
                       m);
    }
    if (group && c.get_bool("dist.shard_optimizer"))
      return dist::make_zero_adamw(std::move(params), o, *group, static_cast<int64_t>(c.get_float("dist.bucket_mb") * 1048576.0));
    return make_adamw(std::move(params), o);
  } catch (const std::invalid_argument& e) {
    throw config_error(e);
  }
}

// The model.* keys as a model's settings.
class ConfigModelSettings final : public ModelSettings {
 public:
  explicit ConfigModelSettings(const Config& c) : c_(c) {}
  int64_t get_int(const std::string& key) const override { return c_.get_int("model." + key); }
  std::string get_string(const std::string& key) const override { return c_.get_string("model." + key); }

 private:
  const Config& c_;
};

}  // namespace

std::unique_ptr<ModelSettings> model_settings(const Config& c) { return std::make_unique<ConfigModelSettings>(c); }

namespace {

DataKind data_kind(const std::string& dataset) { return dataset == "fashion-mnist" ? DataKind::Images : DataKind::Tokens; }

}  // namespace

GPTConfig gpt_config(const Config& c) {
  try {
    GPTConfig g = ht::gpt_config(ConfigModelSettings(c));
    g.precision = parse_precision(c.get_string("train.precision"));
    return g;
  } catch (const OptionsError& e) {
    throw config_error(e);
  }
}

std::string precision_check(const Config& c) {
  if (parse_precision(c.get_string("train.precision")) != Precision::BF16) return "";
  if (bf16_instructions_in_use()) return "";
  // Measured (BENCHMARKS.md, "bf16 mixed precision"): oneDNN's emulated bf16 GEMM is ~2.9x
  // slower than fp32, so the GEMMs widen bf16 operands to fp32 instead. bf16 is then correct and
  // halves activation memory but is no faster: a warning, not a refusal.
  return "train.precision = bf16 on a CPU without bf16 instructions (" + cpu_bf16_features().describe() +
         (cpu_bf16_features().any() ? ", held below them by ONEDNN_MAX_CPU_ISA" : "") +
         "): bf16 GEMMs run on operands widened to fp32, so steps are no faster than train.precision = fp32 "
         "(activation memory is still halved)";
}

bool set_recompute(Session& s, const std::string& level, int64_t every_n_layers) {
  if (!s.set_model_recompute) return false;
  const RecomputeLevel parsed = parse_recompute_level(level);
  s.set_model_recompute(parsed, every_n_layers);
  s.recompute = to_string(parsed);
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
  const ModelSpec& spec = find_model(kind);
  if (spec.data != data_kind(dataset))
    throw ConfigError("model.kind = " + kind + " does not fit data.dataset = " + dataset + " (" + kind + " trains on " +
                      (spec.data == DataKind::Images ? "fashion-mnist" : "kjv, text or tokens") + ")");
  const Precision precision = parse_precision(c.get_string("train.precision"));
  if (precision != Precision::FP32 && !spec.bf16) {
    std::string with_bf16;
    for (const ModelSpec& m : model_registry())
      if (m.bf16) with_bf16 += (with_bf16.empty() ? "" : ", ") + m.name;
    throw ConfigError("train.precision = " + to_string(precision) + " is implemented for model.kind = " + with_bf16 +
                      "; " + kind + " trains in fp32 (set train.precision = fp32)");
  }
  if (with_data) s.data = build_data(c, s);
  if (with_data && group) {
    const int64_t batch = c.get_int("data.batch_size");
    if (batch < group->world_size())
      throw ConfigError(fmt::format("data.batch_size ({}) is the global batch, shared by {} processes: it must be at "
                                    "least the number of processes", batch, group->world_size()));
  }

  DataShape shape;
  if (auto* text = dynamic_cast<TextSource*>(s.data.get())) {
    shape.vocab_size = text->vocab_size();
    shape.context = text->context();
  }
  const ConfigModelSettings settings(c);
  BuiltModel built;
  try {
    built = spec.build(settings, shape, BuildOptions{load_init_from, precision});
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string("model.") + e.what());  // init_from: ... -> model.init_from: ...
  } catch (const OptionsError& e) {
    throw config_error(e);
  }
  s.module = built.module;
  s.objective = std::move(built.objective);
  s.model_summary = built.summary;
  s.set_model_recompute = built.set_recompute;
  s.architecture = built.architecture;
  s.n_head = built.n_head;
  s.attention_map_slices = built.attention_map_slices;
  s.gpt = std::dynamic_pointer_cast<GPT>(s.module);
  s.precision_warning = precision_check(c);
  if (dataset == "tokens") s.byte_level = false;
  const std::string first_phase = c.get_string("run.mode") == "hybrid" ? "warmup" : "full";
  if (recompute_for_phase(c, first_phase) != "none")
    set_recompute(s, recompute_for_phase(c, first_phase), c.get_int("memory.recompute_every"));
  // The optimizer's state is allocated beside the parameters, so the model moves first.
  s.device = run_device(c);
  if (!s.device.is_cpu()) s.module->to(s.device);
  s.optimizer = build_optimizer(c, *s.module, built.muon, group);
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

NowcastStrategyOptions nowcast_options(const Config& c, const std::string& architecture, int64_t n_head) {
  NowcastStrategyOptions o;
  o.model = c.get_string("nowcast.model");
  o.weights = c.get_string("nowcast.weights");
  if (o.weights.empty()) {
    try {
      o.weights = (std::filesystem::path(HT_SOURCE_DIR) / "models" / find_nowcaster(o.model).weights_file).string();
    } catch (const OptionsError& e) {
      throw config_error(e);
    }
  }
  o.architecture = architecture;
  o.n_head = n_head;
  o.period = c.get_int("nowcast.period");
  o.horizon_max = c.get_int("nowcast.horizon_max");
  o.horizon_min = c.get_int("nowcast.horizon_min");
  o.horizon_power = c.get_float("nowcast.horizon_power");
  o.horizon_by_schedule = c.get_bool("nowcast.horizon_by_schedule");
  o.last_jump_step = c.get_int("nowcast.last_jump_step");
  o.last_jump_fraction = c.get_float("nowcast.last_jump_fraction");
  o.verify = c.get_bool("nowcast.verify");
  o.probe_batches = c.get_int("nowcast.probe_batches");
  o.probe_holdout = c.get_bool("nowcast.probe_holdout");
  if (o.verify && o.probe_holdout && c.get_float("data.probe_fraction") == 0.0)
    throw ConfigError("nowcast.probe_holdout = true judges jumps on data held out of training, and data.probe_fraction = 0 "
                      "holds none out: set data.probe_fraction (0.035 holds 2100 Fashion-MNIST images, 16 batches of 128)");
  o.tolerance = c.get_float("nowcast.tolerance");
  o.tolerance_by_horizon = c.get_bool("nowcast.tolerance_by_horizon");
  o.prediction_ms_per_scalar = c.get_float("nowcast.prediction_ms_per_scalar");
  o.verify_after = c.get_int("nowcast.verify_after");
  o.redo_budget = c.get_float("nowcast.redo_budget");
  o.redo_credit = c.get_bool("nowcast.redo_credit");
  o.keep_progress = c.get_bool("nowcast.keep_progress");
  o.trend_states = c.get_int("nowcast.trend_states");
  o.plain_model = c.get_string("nowcast.plain_model");
  o.power_level_states = c.get_int("nowcast.power_level_states");
  o.horizon_search = c.get_int("nowcast.horizon_search");
  o.jump_scale = c.get_float("nowcast.jump_scale");
  o.jump_norm_scale = c.get_float("nowcast.jump_norm_scale");
  o.jump_kinds = c.get_string("nowcast.jump_kinds");
  o.optimizer_state = parse_optimizer_state(c.get_string("nowcast.optimizer_state"));
  o.momentum_scale = c.get_float("nowcast.momentum_scale");
  try {
    o.validate();
  } catch (const std::invalid_argument& e) {
    throw config_error(e);
  }
  return o;
}

std::unique_ptr<StepStrategy> build_strategy(const Config& c, const Session* session) {
  const std::string mode = c.get_string("run.mode");
  if (mode == "lookahead") {
    LookaheadOptions o;
    o.k = c.get_int("lookahead.k");
    o.alpha = c.get_float("lookahead.alpha");
    o.momentum = c.get_float("lookahead.momentum");
    o.until_step = c.get_int("lookahead.until_step");
    o.start_step = c.get_int("lookahead.start_step");
    o.late_step = c.get_int("lookahead.late_step");
    o.late_momentum = c.get_float("lookahead.late_momentum");
    o.bias_correction = c.get_bool("lookahead.bias_correction");
    try {
      return make_lookahead_strategy(o);
    } catch (const std::invalid_argument& e) {
      throw config_error(e);
    }
  }
  if (mode == "nowcast") {
    std::string architecture = c.get_string("model.kind") == "gpt" ? "gpt2" : "feedforward";
    int64_t n_head = architecture == "gpt2" ? gpt_config(c).n_head : 0;
    if (session) {
      architecture = session->architecture;
      n_head = session->n_head;
    }
    try {
      return make_nowcast_strategy(nowcast_options(c, architecture, n_head));
    } catch (const OptionsError& e) {
      throw config_error(e);
    }
  }
  if (mode != "hybrid") return nullptr;
  return make_hybrid_strategy(hybrid_options(c));
}

ConfigError config_error(const std::exception& library_error) {
  // Fields named like their keys: AdamWOptions.beta1 is optim.beta1, HybridOptions.full_steps is
  // hybrid.full_steps.
  static const std::pair<const char*, const char*> prefixes[] = {
      {"AdamWOptions.", "optim."}, {"SgdOptions.", "optim."}, {"HybridOptions.", "hybrid."},
      {"NowcastStrategyOptions.", "nowcast."}, {"ModelSettings.", "model."},
      {"LookaheadOptions.", "lookahead."}};
  std::string text = library_error.what();
  for (const auto& [from, to] : prefixes)
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at))
      text.replace(at, std::strlen(from), to);
  return ConfigError(text);
}

std::string checkpoint_dir(const Config& c) {
  return (std::filesystem::path(c.get_string("run.out_dir")) / "checkpoints").string();
}

std::vector<std::shared_ptr<Callback>> build_callbacks(const Config& c, const Session& s) {
  std::vector<std::shared_ptr<Callback>> callbacks;
  const double qk_scale = c.get_float("optim.qk_update_scale");
  if (qk_scale == 1.0) return callbacks;
  if (s.attention_map_slices.empty())
    throw ConfigError(fmt::format("optim.qk_update_scale = {}: model.kind = {} has no attention maps to scale; "
                                  "set it to 1 or train a gpt", qk_scale, c.get_string("model.kind")));
  // The slices name parameters; the callback finds them by position in the optimizer's list.
  const auto named = s.module->named_parameters(/*recurse=*/true);
  const auto& params = s.optimizer->parameters();
  std::vector<ParamSlice> slices;
  for (const auto& slice : s.attention_map_slices) {
    const at::Tensor* p = named.find(slice.name);
    if (p == nullptr) throw std::logic_error("attention map slice names no parameter: " + slice.name);
    const auto found = std::find_if(params.begin(), params.end(), [&](const at::Tensor& q) { return q.is_same(*p); });
    if (found == params.end()) throw std::logic_error("the optimizer does not update " + slice.name);
    slices.push_back({static_cast<int64_t>(found - params.begin()), slice.dim, slice.begin, slice.end});
  }
  callbacks.push_back(std::make_shared<UpdateScaleCallback>(std::move(slices), qk_scale, c.get_int("optim.qk_update_until")));
  return callbacks;
}

c10::Device run_device(const Config& c) {
  const std::string name = c.get_string("run.device");
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(name);
  } catch (const c10::Error&) {
    throw ConfigError("run.device = " + name + ": must be cpu, cuda or cuda:N");
  }
  if (device.is_cuda() && !torch::cuda::is_available())
    throw ConfigError("run.device = " + name + ": this LibTorch has no CUDA, or no GPU is visible; use run.device=cpu "
                      "or build against a CUDA LibTorch (scripts/gpu-check.sh)");
  if (!device.is_cpu() && !device.is_cuda()) throw ConfigError("run.device = " + name + ": only cpu and cuda are supported");
  if (device.is_cuda() && device.has_index() && device.index() >= static_cast<int>(torch::cuda::device_count()))
    throw ConfigError("run.device = " + name + ": there are " + std::to_string(torch::cuda::device_count()) + " GPUs");
  return device;
}

TrainerOptions trainer_options(const Config& c) {
  TrainerOptions o;
  o.device = run_device(c);
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
  o.average_lag_correction = c.get_float("train.average_lag_correction");
  o.config_text = c.to_toml();
  // Each key's own range is checked by the schema (config_schema.cpp); here only what relates keys.
  if (o.average_lag_correction > 0.0 && o.average_decay == 0.0)
    throw ConfigError("train.average_lag_correction corrects the weight average: set train.average_decay too (e.g. 0.99), or the correction to 0");
  if (!(o.memory.critical_fraction >= o.memory.warn_fraction))
    throw ConfigError("memory.critical_fraction must be in [memory.warn_fraction, 1], a share of memory.budget");
  return o;
}

}  // namespace ht::cli
