// `hybrid-train plan CONFIG [--budget SIZE]`: the planner's estimate for a config, the cheapest
// levers that fit a budget (as config overrides), and what fits GPT-2 on common memory sizes.
#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "commands.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor_registry.h"
#include "hybrid/models/model_registry.h"
#include "hybrid/kernels/precision.h"
#include "session.h"

namespace ht::cli {
namespace {

OptimizerKind optimizer_kind(const Config& c) {
  const std::string name = c.get_string("optim.name");
  if (name == "adamw8bit") return OptimizerKind::AdamW8bit;
  if (name == "muon") return OptimizerKind::Muon;
  if (name == "sgd") return c.get_float("optim.momentum") > 0 ? OptimizerKind::SgdMomentum : OptimizerKind::Sgd;
  return OptimizerKind::AdamW;
}

TrainMode train_mode(const std::string& mode) {
  if (mode == "hybrid") return TrainMode::Hybrid;
  if (mode == "lookahead") return TrainMode::Lookahead;
  if (mode == "nowcast") return TrainMode::Nowcast;
  return TrainMode::Plain;
}

std::string gib(int64_t bytes) {
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
}
std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

std::string describe(const MemoryLevers& l) {
  std::string s = fmt::format("attention {}, recompute {}", to_string(l.attention), to_string(l.recompute));
  if (l.recompute == RecomputeLevel::Full) s += fmt::format(" every {}", l.recompute_every);
  const bool hidden_only = l.optimizer == OptimizerKind::Muon && l.muon_hidden_only;
  return s + fmt::format(", optimizer {}{}, precision {}, mode {}", to_string(l.optimizer),
                         hidden_only ? " (hidden layers only)" : "", to_string(l.precision), to_string(l.mode));
}

// One column per estimate (fp32 and bf16 for a GPT, the config's own marked with *).
void print_breakdown(const std::vector<std::pair<std::string, MemoryEstimate>>& columns) {
  std::printf("  %-18s", "");
  for (const auto& [name, e] : columns) std::printf(" %12s", name.c_str());
  std::printf("\n");
  auto row = [&](const char* label, int64_t MemoryEstimate::*field, const char* note) {
    std::printf("  %-18s", label);
    for (const auto& [name, e] : columns) std::printf(" %12s", mib(e.*field).c_str());
    std::printf("%s\n", note);
  };
  row("parameters", &MemoryEstimate::params, "");
  row("gradients", &MemoryEstimate::grads, "");
  row("optimizer state", &MemoryEstimate::optimizer_state, "");
  if (columns.front().second.mode_state > 0)
    row("mode state", &MemoryEstimate::mode_state, "  (hybrid, Lookahead or nowcast state, weight average)");
  row("activations", &MemoryEstimate::activations, "  (saved for backward, and the batch)");
  row("transient", &MemoryEstimate::transient, "  (gradients and workspace in flight)");
  row("peak", &MemoryEstimate::peak, "");
  row("forward, no grad", &MemoryEstimate::predict_peak, "  (evaluation, predicted steps; nowcast: a jump)");
  for (const auto& [name, e] : columns) std::printf("  %s peak at %s\n", name.c_str(), e.peak_at.c_str());
}

// Max batch at T = 1024 for the GPT-2 sizes on 8/16/24/80 GiB: plain settings and all levers.
void print_gpt2_table(int64_t threads) {
  const std::vector<std::pair<const char*, const char*>> models = {
      {"gpt2", "124M"}, {"gpt2-medium", "355M"}, {"gpt2-large", "774M"}, {"gpt2-xl", "1.5B"}};
  const std::vector<int64_t> budgets = {8, 16, 24, 80};
  MemoryLevers plain;
  MemoryLevers plain_bf16;
  plain_bf16.precision = Precision::BF16;
  MemoryLevers all;
  all.attention = AttentionKind::Flash;
  all.recompute = RecomputeLevel::Full;
  all.optimizer = OptimizerKind::AdamW8bit;
  all.precision = Precision::BF16;
  std::printf("\nlargest batch at context 1024 (plain fp32: naive attention, no recompute, AdamW / the same in\n"
              "bf16 / all levers: flash attention, full recompute, 8-bit AdamW, bf16); 0 = not even batch 1\n");
  std::printf("  %-12s %6s", "model", "params");
  for (int64_t gb : budgets) std::printf(" %17s", fmt::format("{} GiB", gb).c_str());
  std::printf("\n");
  for (const auto& [preset, label] : models) {
    const GPTConfig g = gpt_preset(preset);
    TrainShape s;
    s.context = 1024;
    s.threads = threads;
    std::printf("  %-12s %6s", preset, label);
    for (int64_t gb : budgets) {
      const int64_t budget = gb << 30;
      const std::string cell = fmt::format("{} / {} / {}", max_gpt_batch(g, s, plain, budget),
                                           max_gpt_batch(g, s, plain_bf16, budget), max_gpt_batch(g, s, all, budget));
      std::printf(" %17s", cell.c_str());
    }
    std::printf("\n");
  }
}

}  // namespace

PlanInputs plan_inputs(const Config& c) {
  PlanInputs in;
  in.kind = c.get_string("model.kind");
  in.config = c;
  in.shape.batch = c.get_int("data.batch_size");
  in.shape.grad_accum = c.get_int("optim.grad_accum");
  const int64_t threads = c.get_int("run.threads");
  in.shape.threads = threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  in.shape.cuda = c.get_string("run.device").rfind("cuda", 0) == 0;
  in.levers.optimizer = optimizer_kind(c);
  in.levers.muon_hidden_only = c.get_bool("optim.muon_hidden_only");
  // The phase with the least recompute sets the peak.
  const std::vector<std::string> phases =
      c.get_string("run.mode") == "hybrid" ? std::vector<std::string>{"warmup", "full", "correct"}
                                           : std::vector<std::string>{"full"};
  in.levers.recompute = RecomputeLevel::Full;
  for (const auto& phase : phases)
    in.levers.recompute = std::min(in.levers.recompute, parse_recompute_level(recompute_for_phase(c, phase)));
  in.levers.recompute_every = c.get_int("memory.recompute_every");
  in.levers.attention = parse_attention_kind(c.get_string("model.attention"));
  in.levers.precision = parse_precision(c.get_string("train.precision"));
  in.levers.mode = train_mode(c.get_string("run.mode"));
  if (in.levers.mode == TrainMode::Hybrid) {
    const HybridOptions h = hybrid_options(c);
    in.levers.hybrid_state_bytes = [h](const std::vector<int64_t>& numels) { return hybrid_state_bytes(numels, h); };
  }
  if (in.levers.mode == TrainMode::Nowcast) {
    const bool gpt = c.get_string("model.kind") == "gpt";
    const NowcastStrategyOptions n = nowcast_options(c, gpt ? "gpt2" : "feedforward", gpt ? gpt_config(c).n_head : 0);
    in.levers.nowcast_state_bytes = [n](const std::vector<int64_t>& numels) { return nowcast_state_bytes(numels, n); };
    in.levers.nowcast_jump_bytes = [n](const std::vector<int64_t>& numels) { return nowcast_jump_bytes(numels, n); };
  }
  in.levers.probe_batches =
      c.get_int(in.levers.mode == TrainMode::Nowcast ? "nowcast.probe_batches" : "hybrid.probe_batches");
  in.levers.weight_average = c.get_float("train.average_decay") > 0.0;
  in.levers.average_lag_correction = in.levers.weight_average && c.get_float("train.average_lag_correction") > 0.0;
  in.levers.outer_momentum = c.get_float("lookahead.momentum") > 0.0;
  if (in.kind == "gpt") {
    in.gpt = gpt_config(c);
    in.shape.context = c.get_int("data.context");
    if (in.shape.context > in.gpt.block_size)  // each key's own range is the schema's
      throw ConfigError(fmt::format("data.context ({}) must lie in [1, block_size = {}]", in.shape.context, in.gpt.block_size));
  }
  return in;
}

MemoryEstimate estimate_memory(const PlanInputs& in) {
  // The model's own memory model from the registry, or a measured step where it has none.
  DataShape data;
  if (in.kind == "gpt") data = DataShape{in.gpt.vocab_size, in.shape.context};
  return estimate_model_memory(find_model(in.kind), *model_settings(in.config), data, in.shape, in.levers);
}

namespace {

// Per rank of a data-parallel run: the rank's share of the batch, gradients in allreduce
// buckets, and the optimizer state replicated or sharded (ZeRO-1).
void print_data_parallel(const Config& c, const PlanInputs& in, int nproc) {
  PlanInputs r = in;
  r.shape.batch = (in.shape.batch + nproc - 1) / nproc;
  r.levers.ranks = nproc;
  r.levers.bucket_bytes = static_cast<int64_t>(c.get_float("dist.bucket_mb") * 1048576.0);
  r.levers.first_bucket_bytes = static_cast<int64_t>(c.get_float("dist.first_bucket_mb") * 1048576.0);
  r.levers.shard_optimizer = false;
  const MemoryEstimate rep = estimate_memory(r);
  r.levers.shard_optimizer = true;
  const MemoryEstimate sh = estimate_memory(r);
  const bool can_shard = in.levers.optimizer == OptimizerKind::AdamW;
  std::printf("\nper rank, %d processes (batch %lld of %lld each, at most):\n", nproc,
              static_cast<long long>(r.shape.batch), static_cast<long long>(in.shape.batch));
  std::printf("  %-20s %14s %14s\n", "", "replicated", can_shard ? "sharded" : "(sharded: AdamW only)");
  auto row = [&](const char* name, int64_t a, int64_t b) {
    std::printf("  %-20s %14s %14s\n", name, mib(a).c_str(), can_shard ? mib(b).c_str() : "-");
  };
  row("parameters", rep.params, sh.params);
  row("gradients (buckets)", rep.grads, sh.grads);
  row("optimizer state", rep.optimizer_state, sh.optimizer_state);
  if (rep.mode_state > 0) row("mode state", rep.mode_state, sh.mode_state);
  row("activations", rep.activations, sh.activations);
  row("transient", rep.transient, sh.transient);
  row("peak", rep.peak, sh.peak);
  std::printf("  (sharded: dist.shard_optimizer=true keeps the AdamW moments of 1/%d of the parameters and an\n"
              "  all-gather window; a checkpoint gathers the moments on rank 0 for the time of the save)\n", nproc);
}

}  // namespace

int run_plan(const std::vector<std::string>& args, const std::string& budget_text, int nproc) {
  const Config c = load_config(args);
  const PlanInputs in = plan_inputs(c);
  const int64_t budget = budget_text.empty() ? c.get_bytes("memory.budget") : parse_size(budget_text);
  const MemoryEstimate e = estimate_memory(in);

  if (in.kind == "gpt") {
    fmt::print("model: gpt, {} layers, {} heads, d {}, vocab {}; batch {} x {} tokens, {} threads\n",
               in.gpt.n_layer, in.gpt.n_head, in.gpt.n_embd, in.gpt.vocab_size, in.shape.batch,
               in.shape.context, in.shape.threads);
  } else {
    fmt::print("model: {}; batch {} images\n", in.kind, in.shape.batch);
  }
  std::printf("levers: %s\n", describe(in.levers).c_str());
  std::printf("estimated tensor memory of a training step (as the tracking allocator counts it):\n");
  if (in.kind == "gpt") {
    // fp32 and bf16 side by side; the config's own precision is marked.
    PlanInputs other = in;
    other.levers.precision = in.levers.precision == Precision::BF16 ? Precision::FP32 : Precision::BF16;
    const MemoryEstimate o = estimate_memory(other);
    const bool is_bf16 = in.levers.precision == Precision::BF16;
    print_breakdown({{is_bf16 ? "fp32" : "fp32 *", is_bf16 ? o : e}, {is_bf16 ? "bf16 *" : "bf16", is_bf16 ? e : o}});
    std::printf("  (* train.precision; bf16 on this CPU: %s)\n", cpu_bf16_features().describe().c_str());
  } else {
    print_breakdown({{"fp32", e}});
  }

  int code = kOk;
  if (budget > 0) {
    const bool fits = e.peak <= budget;
    std::printf("\nbudget %s: %s (peak %.0f %% of it)\n", gib(budget).c_str(), fits ? "fits" : "does NOT fit",
                100.0 * e.peak / budget);
    if (!fits) code = kPlanDoesNotFit;
    if (!fits && in.kind == "gpt") {
      const Recommendation r = recommend_gpt(in.gpt, in.shape, in.levers, budget, cpu_bf16_features().any());
      std::string overrides;
      for (const auto& ch : r.changes) overrides += " " + ch;
      if (r.fits) {
        std::printf("recommended:%s\n  -> peak %s (%s)\n", overrides.c_str(), gib(r.estimate.peak).c_str(),
                    describe(r.levers).c_str());
      } else {
        std::printf("nothing fits: even with%s the peak is %s\n",
                    overrides.empty() ? " every lever on" : overrides.c_str(), gib(r.estimate.peak).c_str());
      }
    } else if (!fits) {
      std::printf("the memory levers are GPT's; lower data.batch_size (raise optim.grad_accum to keep the effective batch)\n");
    }
  }
  if (nproc > 1) print_data_parallel(c, in, nproc);
  if (in.kind == "gpt") print_gpt2_table(in.shape.threads);
  return code;
}

}  // namespace ht::cli
