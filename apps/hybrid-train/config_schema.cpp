// Every configuration key the CLI understands, with its default and allowed values.
// Defaults train the tiny GPT on the KJV Bible; presets in configs/ change what they need.
#include "config.h"

#include <algorithm>

#include <fmt/format.h>

#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor_registry.h"
#include "hybrid/models/model_registry.h"

namespace ht::cli {
namespace {
template <typename T>
std::string num(T value) { return fmt::format("{}", value); }
}  // namespace

// Upper ends that only stop overflow and typos: no run here comes near them.
constexpr double kMillion = 1e6;
constexpr double kHuge = 1e9;
constexpr double kSteps = 1e12;
constexpr double kInt64Max = 9223372036854775807.0;  // rounds to 2^63: every int64 fits
constexpr double kMaxBytes = 1152921504606846976.0;  // 2^60 bytes, 1 EiB

namespace {

// hybrid.predictor's values and each predictor's own keys (hybrid.<option>), from the registry:
// a new predictor brings its keys to the CLI, `config --keys` and the range checks by itself.
// model.kind's values and each model's own keys (model.<key>), from the model registry; a key
// two models declare (a shared setting) is listed once, as the first declares it.
std::vector<KeySpec> model_keys() {
  std::vector<std::string> names;
  for (const auto& spec : model_registry()) names.push_back(spec.name);
  std::vector<KeySpec> keys = {{"model.kind", KeyType::String, model_registry().front().name, names, "architecture"}};
  for (const auto& spec : model_registry())
    for (const auto& k : spec.keys) {
      const std::string key = "model." + k.key;
      if (std::any_of(keys.begin(), keys.end(), [&](const KeySpec& s) { return s.key == key; })) continue;
      keys.push_back({key, k.integer ? KeyType::Int : KeyType::String, k.default_value, k.allowed,
                      spec.name + ": " + k.help, k.integer ? Range::in(k.min, k.max) : Range{}});
    }
  return keys;
}

std::vector<std::string> nowcaster_names() {
  std::vector<std::string> names;
  for (const auto& spec : nowcaster_registry()) names.push_back(spec.name);
  return names;
}

std::vector<KeySpec> predictor_keys() {
  std::vector<std::string> names;
  for (const auto& spec : predictor_registry()) names.push_back(spec.name);
  std::vector<KeySpec> keys = {{"hybrid.predictor", KeyType::String, HybridOptions{}.predictor, names, "update predictor"}};
  for (const auto& spec : predictor_registry())
    for (const auto& o : spec.options)
      keys.push_back({"hybrid." + o.key, o.integer ? KeyType::Int : KeyType::Float,
                      o.integer ? num(static_cast<int64_t>(o.default_value)) : num(o.default_value), {}, o.help,
                      Range::in(o.min, o.max)});
  return keys;
}

}  // namespace

const std::vector<KeySpec>& config_schema() {
  using T = KeyType;
  using R = Range;
  static const HybridOptions H;
  static const NowcastStrategyOptions N;
  static const std::vector<KeySpec> schema = [] {
  std::vector<KeySpec> keys = {
      {"run.out_dir", T::String, "runs/default", {}, "directory for metrics.jsonl and checkpoints/", {}, /*non_empty=*/true},
      {"run.seed", T::Int, "1337", {}, "seed for initialisation and data order", R::in(0, kInt64Max)},
      {"run.threads", T::Int, "0", {}, "intra-op threads; 0 = all cores", R::in(0, 1024).means("0 = all cores")},
      {"run.flush_denormal", T::Bool, "true", {}, "flush subnormal floats to zero on every thread (without it a GPT on an Intel Xeon slowed down up to 4.35x as it learned)"},
      {"run.device", T::String, "cpu", {}, "where the model trains: cpu, cuda or cuda:N (needs a LibTorch with CUDA)", {}, /*non_empty=*/true},
      {"run.mode", T::String, "plain", {"plain", "hybrid", "lookahead", "nowcast"}, "training mode"},
      {"run.log_every", T::Int, "10", {}, "print every n-th step when output is not a terminal", R::in(1, kHuge)},

      {"data.dataset", T::String, "kjv", {"kjv", "fashion-mnist", "text", "tokens"}, "training data"},
      {"data.path", T::String, "", {}, "file for dataset = text (UTF-8 bytes) or tokens (uint16 ids)"},
      {"data.fashion_mnist_dir", T::String, "/usr/share/datasets/fashion-mnist", {}, "IDX .gz files", {}, /*non_empty=*/true},
      {"data.batch_size", T::Int, "16", {}, "sequences or images per batch", R::in(1, kMillion)},
      {"data.context", T::Int, "128", {}, "tokens per training sequence (text data)", R::in(1, kMillion)},
      {"data.val_fraction", T::Float, "0.1", {}, "share of a text corpus held out for validation", R::in(0, 1).open_lo().open_hi().means("0 would leave nothing to evaluate on")},
      {"data.probe_fraction", T::Float, "0", {}, "share of the training data held out of training and validation for verdicts (nowcast.probe_holdout); 0 = none", R::in(0, 0.5).open_hi()},
      {"data.val_batches", T::Int, "20", {}, "validation batches per evaluation; -1 = all", R::in(1, kHuge).or_value(-1, "-1 = all")},


      {"optim.name", T::String, "adamw", {"adamw", "sgd", "adamw8bit", "muon"}, "optimizer (muon: orthogonalized momentum for weight matrices, AdamW for the rest, one rate)"},
      {"optim.lr", T::Float, "0.003", {}, "peak learning rate", R::in(0, 10)},
      {"optim.weight_decay", T::Float, "0.1", {}, "decoupled weight decay (matrices only)", R::in(0, 10)},
      {"optim.beta1", T::Float, "0.9", {}, "Adam beta1", R::in(0, 1).open_hi()},
      {"optim.beta2", T::Float, "0.95", {}, "Adam beta2", R::in(0, 1).open_hi()},
      {"optim.eps", T::Float, "1e-8", {}, "Adam epsilon", R::in(0, 1).open_lo()},
      {"optim.momentum", T::Float, "0.9", {}, "SGD momentum", R::in(0, 1).open_hi()},
      {"optim.muon_momentum", T::Float, "0.95", {}, "Muon: Nesterov momentum of the matrices", R::in(0, 1).open_hi()},
      {"optim.muon_ns_steps", T::Int, "5", {}, "Muon: Newton-Schulz iterations per matrix and step", R::in(1, 100)},
      {"optim.muon_precision", T::String, "fp32", {"fp32", "bf16"}, "Muon: the Newton-Schulz matmuls' precision (bf16: tiny GPT step 1.17x AdamW's instead of 1.31x on an AVX512-BF16 EPYC; slow without bf16 arithmetic)"},
      {"optim.muon_split_qkv", T::Bool, "true", {}, "Muon: orthogonalize GPT-2's c_attn as its q, k and v thirds"},
      {"optim.muon_hidden_only", T::Bool, "false", {}, "Muon: the input layer and the output head take AdamW's step too (Jordan's recipe; MLP: fc1, fc3; CNNs: conv1, fc; a GPT's are wte already)"},
      {"optim.grad_clip", T::Float, "1.0", {}, "max global gradient norm; 0 = off", R::in(0, 1e9).means("0 = off")},
      {"optim.grad_accum", T::Int, "1", {}, "batches per optimizer step", R::in(1, kMillion)},
      {"optim.qk_update_scale", T::Float, "1", {}, "attention models: the query and key weights' updates times this (1 = off)", R::in(0, 100)},
      {"optim.qk_update_until", T::Int, "0", {}, "optim.qk_update_scale for the steps before this one", R::in(0, kSteps).means("0 = every step")},

      {"schedule.kind", T::String, "cosine", {"cosine", "constant"}, "learning-rate schedule"},
      {"schedule.warmup_steps", T::Int, "100", {}, "linear warmup steps", R::in(0, kSteps)},
      {"schedule.min_lr_ratio", T::Float, "0.1", {}, "cosine floor as a fraction of optim.lr", R::in(0, 1)},

      {"train.steps", T::Int, "2000", {}, "optimizer steps in total", R::in(1, kSteps)},
      {"train.eval_every", T::Int, "250", {}, "evaluate every n steps; 0 = only at the end", R::in(0, kSteps).means("0 = only at the end")},
      {"train.precision", T::String, "fp32", {"fp32", "bf16"}, "compute precision: bf16 = bf16 matmuls, attention and GELU with fp32 accumulation, fp32 master weights, optimizer, loss and LayerNorm statistics (GPT)"},
      {"train.average_decay", T::Float, "0", {}, "exponential weight average that evaluations, checkpoints and sample use (e.g. 0.97); 0 = off", R::in(0, 1).open_hi().means("0 = off")},
      {"train.average_lag_correction", T::Float, "0", {}, "share of the weight average's lag behind the weights that evaluations take back (a double exponential average; 1 = none on a straight path); 0 = the average as it is", R::in(0, 1)},

      {"checkpoint.every_steps", T::Int, "500", {}, "save every n steps; 0 = off", R::in(0, kSteps).means("0 = off")},
      {"checkpoint.every_seconds", T::Float, "300", {}, "save every n seconds; 0 = off", R::in(0, 1e9).means("0 = off")},
      {"checkpoint.keep_last", T::Int, "3", {}, "checkpoints kept in out_dir/checkpoints", R::in(1, kMillion)},
      {"checkpoint.resume", T::Bool, "true", {}, "continue from the newest good checkpoint in out_dir; false: start over (out_dir must hold no checkpoints)"},

      {"memory.budget", T::Size, "0", {}, "tensor memory budget: bytes, 8GiB, or a fraction of RAM; 0 = none", R::in(0, kMaxBytes).means("0 = none")},
      {"memory.warn_fraction", T::Float, "0.85", {}, "warn above this share of the budget", R::in(0, 1).open_lo()},
      {"memory.critical_fraction", T::Float, "0.95", {}, "act above this share of the budget", R::in(0, 1).open_lo()},
      {"memory.recompute", T::String, "none", {"none", "selective", "full"}, "activation recompute"},
      {"memory.recompute_every", T::Int, "1", {}, "full recompute: every n-th block", R::in(1, 1024)},
      {"memory.recompute_warmup", T::String, "inherit", {"inherit", "none", "selective", "full"}, "recompute in hybrid warmup steps (inherit: memory.recompute)"},
      {"memory.recompute_full", T::String, "inherit", {"inherit", "none", "selective", "full"}, "recompute in full steps (plain training's only phase)"},
      {"memory.recompute_correct", T::String, "inherit", {"inherit", "none", "selective", "full"}, "recompute in hybrid correct steps; predicted steps run no backward"},

      // Hybrid defaults come from HybridOptions so the CLI and the library never drift apart.
      {"hybrid.warmup_steps", T::Int, num(H.warmup_steps), {}, "plain steps before anything is recorded", R::in(0, kSteps)},
      {"hybrid.full_steps", T::Int, num(H.full_steps), {}, "recorded full steps per cycle (>= 4 with predictor drift)", R::in(1, kSteps)},
      {"hybrid.correct_steps", T::Int, num(H.correct_steps), {}, "real steps after a predict phase that measure its error", R::in(1, kSteps)},
      {"hybrid.min_predict_steps", T::Int, num(H.min_predict_steps), {}, "first predict horizon (and a probe's)", R::in(1, kSteps)},
      {"hybrid.max_predict_steps", T::Int, num(H.max_predict_steps), {}, "longest predict phase", R::in(1, kSteps)},
      {"hybrid.verify", T::String, to_string(H.verify), {"batch", "holdout"}, "what a predicted step is verified on"},
      {"hybrid.verify_every", T::Int, num(H.verify_every), {}, "holdout verification every n predicted steps", R::in(1, kSteps)},
      {"hybrid.probe_batches", T::Int, num(H.probe_batches), {}, "training batches held out as the verification probe", R::in(1, kMillion)},
      {"hybrid.tolerance", T::Float, num(H.tolerance), {}, "accepted loss rise relative to the last verified loss", R::in(0, 1)},
      {"hybrid.min_step_worth", T::Float, num(H.min_step_worth), {}, "holdout: a kept predicted step must lower the probe loss by this fraction of a real step's decrease", R::in(0, 16)},
      {"hybrid.max_step_scale", T::Float, num(H.max_step_scale), {}, "predicted-update multiplier at full confidence", R::in(1, 16)},
      {"hybrid.pay_check", T::Bool, H.pay_check ? "true" : "false", {}, "predict only while it lowers the loss faster per second"},
      {"hybrid.pay_check_clock", T::String, to_string(H.pay_check_clock), {"seconds", "steps"}, "the pay check's rates per second (wall-clock: decisions depend on machine load) or per step (deterministic reruns)"},
      {"lookahead.k", T::Int, "5", {}, "Lookahead: fast steps per slow update", R::in(1, kSteps)},
      {"lookahead.alpha", T::Float, "0.5", {}, "Lookahead: slow-weights step size (SNOO: outer learning rate)", R::in(0, 1).open_lo()},
      {"lookahead.momentum", T::Float, "0", {}, "outer Nesterov momentum on the slow weights' steps; > 0 makes Lookahead SNOO", R::in(0, 1).open_hi().means("0 = Lookahead, > 0 = SNOO")},
      {"lookahead.until_step", T::Int, "0", {}, "hand over to plain steps at the first slow update at or after this step (SNOO for the early phase only)", R::in(0, kSteps).means("0 = to the end")},
      {"lookahead.start_step", T::Int, "0", {}, "plain steps before this step; the first slow update period starts at the first step at or after it, from the weights there", R::in(0, kSteps).means("0 = from the first step")},
      {"lookahead.late_step", T::Int, "0", {}, "SNOO: switch to lookahead.late_momentum at the first slow update at or after this step, alpha rescaled to keep the steady outer step alpha / (1 - momentum)", R::in(0, kSteps).means("0 = one momentum throughout")},
      {"lookahead.late_momentum", T::Float, "0.5", {}, "SNOO: outer momentum from lookahead.late_step on", R::in(0, 1).open_hi()},
      {"lookahead.bias_correction", T::Bool, "false", {}, "SNOO: divide the t-th outer step by 1 - momentum^(t+1), so the first ones are the steady step alpha / (1 - momentum) too"},

      // Nowcast defaults come from NowcastStrategyOptions (NiNo's schedule); nowcast.model's values
      // from the nowcaster registry.
      {"nowcast.model", T::String, N.model, nowcaster_names(), "pretrained nowcaster (run.mode = nowcast)"},
      {"nowcast.weights", T::String, "", {}, "its weights file; empty = models/<its file> in the source tree (nino/nino_mlp.safetensors, ...)"},
      {"nowcast.period", T::Int, num(N.period), {}, "steps per jump; a state of the weights is recorded every period / 5 (a multiple of 5)", R::in(5, kSteps)},
      {"nowcast.horizon_max", T::Int, num(N.horizon_max), {}, "first jump's horizon, in recording intervals (period / 5 steps)", R::in(1, 1000)},
      {"nowcast.horizon_min", T::Int, num(N.horizon_min), {}, "last jump's horizon (= horizon_max: constant)", R::in(1, 1000)},
      {"nowcast.horizon_power", T::Float, num(N.horizon_power), {}, "decay of the horizon over the run (NiNo: 2)", R::in(0, 16).open_lo()},
      {"nowcast.horizon_by_schedule", T::Bool, N.horizon_by_schedule ? "true" : "false", {}, "read each k as plain's steps ahead under the learning-rate schedule: ask the nowcaster for the intervals of its states' pace that cover them (a decaying rate shortens the jumps)"},
      {"nowcast.last_jump_step", T::Int, num(N.last_jump_step), {}, "no jump after this step (0: none after the run's end); the states are still recorded", R::in(0, kSteps)},
      {"nowcast.last_jump_fraction", T::Float, num(N.last_jump_fraction), {}, "no jump after this share of the run (0.5: none after mid-run; 0: no limit); the states are still recorded", R::in(0, 1).means("0 = no limit")},
      {"nowcast.verify", T::Bool, N.verify ? "true" : "false", {}, "check each jump on a probe and undo it when the probe loss rises"},
      {"nowcast.probe_batches", T::Int, num(N.probe_batches), {}, "training batches peeked as the verification probe", R::in(1, kMillion)},
      {"nowcast.probe_holdout", T::Bool, N.probe_holdout ? "true" : "false", {}, "judge jumps on data held out of training (data.probe_fraction) instead of the next training batches: catches jumps that overfit"},
      {"nowcast.horizon_search", T::Int, num(N.horizon_search), {}, "horizons each jump tries on the probe (k, 2k, k/2, 4k, ...); 1 = the schedule's only", R::in(1, 16)},
      {"nowcast.jump_scale", T::Float, num(N.jump_scale), {}, "a jump moves the weights by this multiple of the predicted change (1 = to the prediction)", R::in(0, 4).open_lo()},
      {"nowcast.jump_norm_scale", T::Float, num(N.jump_norm_scale), {}, "each tensor's norm after a jump: its norm before plus this share of the predicted change to it (1 = the prediction's, 0 = unchanged; the direction is the prediction's)", R::in(0, 1)},
      {"nowcast.jump_kinds", T::String, N.jump_kinds, {}, "the parameter kinds a jump moves: all, or kinds joined by + (linear, conv, bias, norm, wte, wpe, attn); the others stay put", {}, /*non_empty=*/true},
      {"nowcast.verify_after", T::Int, num(N.verify_after), {}, "delayed verification: judge a jump after this many real steps from it, against plain's expected progress (0 = right after the jump; < 4 x period / 5)", R::in(0, kSteps).means("0 = judge right after the jump")},
      {"nowcast.redo_budget", T::Float, num(N.redo_budget), {}, "delayed verification: share of the run's steps undone windows may throw away before jumps stop (0 or 1 = no limit)", R::in(0, 1)},
      {"nowcast.redo_credit", T::Bool, N.redo_credit ? "true" : "false", {}, "delayed verification: a kept jump adds to the redo budget the steps it put the run ahead of plain (by the verdict's extrapolation)"},
      {"nowcast.keep_progress", T::Bool, N.keep_progress ? "true" : "false", {}, "delayed verification: keep a failed jump whose probe loss is still below the pre-jump weights' (undoing would cost the whole window again; its lag behind plain is charged to the redo budget)"},
      {"nowcast.plain_model", T::String, N.plain_model, {"trend", "power"}, "delayed verification: plain's progress over the window, from the pace of the states before each jump (trend) or a power of the step fitted to plain's first states (power)"},
      {"nowcast.power_level_states", T::Int, num(N.power_level_states), {}, "delayed verification, plain_model = power: states before the jump whose losses set the power's level (1 = the pre-jump state's alone; more average out their noise; at most 5 less the states the window records over)", R::in(1, 5)},
      {"nowcast.trend_states", T::Int, num(N.trend_states), {}, "delayed verification: states before the jump whose probe losses plain's expected progress is fitted to (2 = the last two; at most 5 less the states the window records over)", R::in(2, 5)},
      {"nowcast.tolerance", T::Float, num(N.tolerance), {}, "accepted probe-loss rise over a jump, relative to the loss before it", R::in(0, 1)},
      {"nowcast.tolerance_by_horizon", T::Bool, N.tolerance_by_horizon ? "true" : "false", {}, "scale the tolerance by the jump's horizon, k / horizon_max: far jumps get all of it, short late ones little"},
      {"nowcast.prediction_ms_per_scalar", T::Float, num(N.prediction_ms_per_scalar), {}, "a prediction's price per scalar in ms for the redo budget; -1 = timed once on a 128 x 128 layer (set it to reproduce a run's jumps exactly)", R::in(-1, 1e6).means("-1 = timed once")},
      {"nowcast.optimizer_state", T::String, to_string(N.optimizer_state), {"keep", "reset", "rescale"}, "optimizer state after a kept jump: keep, reset (as new), rescale (first moment x momentum_scale)"},
      {"nowcast.momentum_scale", T::Float, num(N.momentum_scale), {}, "optimizer_state = rescale: factor on the first moment", R::in(0, 1)},

      // Data-parallel runs only (train --nproc N, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set).
      {"dist.backend", T::String, "gloo", {"gloo", "nccl"}, "c10d backend: gloo (CPU); nccl needs a CUDA LibTorch"},
      {"dist.shard_optimizer", T::Bool, "false", {}, "ZeRO-1: each rank keeps the AdamW moments of 1/N of the parameters and all-gathers the weights"},
      {"dist.bucket_mb", T::Float, "25", {}, "gradient allreduce bucket size in MiB (the first bucket: dist.first_bucket_mb)", R::in(0, 1 << 20).open_lo()},
      {"dist.first_bucket_mb", T::Float, "1", {}, "size of the first gradient bucket in MiB (small, so communication starts early in backward)", R::in(0, 1 << 20).open_lo()},
      {"dist.overlap", T::Bool, "true", {}, "start each bucket's allreduce while backward still runs; false: after backward"},
      {"dist.timeout", T::Float, "120", {}, "seconds a collective may wait for the other ranks before the run stops naming the rank", R::in(1, 86400)},
      {"dist.checksum_every", T::Int, "100", {}, "compare a checksum of the weights across ranks every n steps (and at every checkpoint); 0 = at checkpoints only", R::in(0, kSteps).means("0 = at checkpoints only")},

      {"sample.prompt", T::String, "And God said", {}, "prompt for `sample` and the end of `train`", {}, /*non_empty=*/true},
      {"sample.tokens", T::Int, "200", {}, "tokens to generate", R::in(0, kMillion)},
      {"sample.temperature", T::Float, "0.8", {}, "sampling temperature; 0 = greedy", R::in(0, 100).means("0 = greedy")},
      {"sample.top_k", T::Int, "40", {}, "sample among the k most likely tokens; 0 = all", R::in(0, kMillion).means("0 = all tokens")},
  };
  // The models' keys go where optim.* begins, the predictors' where hybrid.* begins.
  const auto models_at = std::find_if(keys.begin(), keys.end(), [](const KeySpec& k) { return k.key.rfind("optim.", 0) == 0; });
  const std::vector<KeySpec> models = model_keys();
  keys.insert(models_at, models.begin(), models.end());
  const auto at = std::find_if(keys.begin(), keys.end(), [](const KeySpec& k) { return k.key.rfind("hybrid.", 0) == 0; });
  const std::vector<KeySpec> predictors = predictor_keys();
  keys.insert(at, predictors.begin(), predictors.end());
  return keys;
  }();
  return schema;
}

}  // namespace ht::cli
