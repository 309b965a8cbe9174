// Benchmark of record for hybrid training: plain vs hybrid vs Lookahead on real tasks, several
// seeds, the modes of a seed stepped side by side. Target = the validation loss plain reaches at ~80 % of its step budget;
// reports wall-clock and steps to target, loss at equal wall-clock, peak memory; writes CSV.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include "bench_tasks.h"
#include "hybrid-train/config.h"
#include "hybrid-train/session.h"
#include "hybrid/core/allocator.h"
#include "core/eval_schedule.h"
#include "hybrid/core/runtime.h"
#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "hybrid/hybrid/strategy.h"

namespace fs = std::filesystem;
using ht::cli::Config;

struct Point {
  int64_t step;
  double seconds;  // training wall-clock only (evaluation excluded: it is the same for every mode)
  double val_loss;
  double val_accuracy;  // NaN for objectives without one (the GPTs)
  // L2 norms of the evaluated weights (the average in plain-average mode): all parameters
  // together, and each tensor by name (what a jump does to the weights' scale, beside the loss).
  double weight_norm;
  std::vector<std::pair<std::string, double>> tensor_norms;
};

struct RunResult {
  std::string task, mode;
  int64_t seed;
  std::vector<Point> curve;
  int64_t peak_bytes = 0;
  double total_seconds = 0;
  int64_t predicted_applied = 0;  // hybrid modes: predicted updates added to the weights
  int64_t predicted_kept = 0;     // of those, not rolled back
  // Nowcast modes: its own time (setup, predictions, probes, recording) and what it did.
  double nowcast_ms = 0;
  std::string nowcast_summary;
};

// Nowcast modes: a registered nowcaster's name - "wnn", "nino", "own", "own-gpt" (run.mode=nowcast with
// it, NiNo's defaults) - with a
// suffix "-reset" / "-rescale" (the optimizer's state after a jump, unverified: compare with
// "-noverify", which keeps it), "-noverify" or "-search"
// (nowcast.horizon_search=5: each jump tries k, 2k, k/2, 4k, k/4 on the probe) or "-late"
// (delayed verification: each jump judged period / 10 real steps after it) or "-long" (judged
// period / 5 - 1 steps after it, on a 16-batch probe) or "-span" (period / 4, past the next
// recorded state, on a 16-batch probe) or "-span-half" (the same, each jump half the predicted change)
// or "-span-held" (the same, judged on 16 batches held out of training: needs --set
// data.probe_fraction=F, which every mode then shares, so plain trains on the same images) or
// "-span-keep" (span-held, keeping a failed jump that still made progress: nowcast.keep_progress) or
// "-span-power" (span-held, plain's progress a power of the step: nowcast.plain_model=power).
// A mode may carry config overrides of its own after '@' ("nino-span-power@nowcast.tolerance=0.05",
// several joined by '@'), so that two settings of one mode run side by side on the same seed -
// the only pairing whose wall-clock ratios compare (a shared VM's speed drifts between runs).
// They are applied after --set and win over it; the whole string names the mode in the CSVs.
struct ModeSpec {
  std::string base;                    // a mode of all_modes below
  std::vector<std::string> overrides;  // "key=value"
};

ModeSpec split_mode(const std::string& mode) {
  ModeSpec spec;
  size_t at = mode.find('@');
  spec.base = mode.substr(0, at);
  while (at != std::string::npos) {
    const size_t next = mode.find('@', at + 1);
    spec.overrides.push_back(mode.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  return spec;
}

// The registered nowcaster a mode names ("own-gpt-late": "own-gpt", not "own"), or "" for none.
std::string nowcast_model_of(const std::string& full_mode) {
  const std::string mode = split_mode(full_mode).base;
  std::string best;
  for (const auto& spec : ht::nowcaster_registry())
    if ((mode == spec.name || mode.rfind(spec.name + "-", 0) == 0) && spec.name.size() > best.size()) best = spec.name;
  return best;
}

int64_t tensor_bytes_now() { return ht::allocator_stats().current_bytes; }

// A mode's whole config: the task's, the mode's own overrides and the --set ones (hybrid.* and
// nowcast.* only where they apply). The up-front check of --set builds the same.
Config mode_config(const std::string& task, const std::string& full_mode, int64_t seed, int64_t steps,
                   const std::vector<std::string>& extra, double average_decay, const std::string& protocol) {
  const auto [mode, own] = split_mode(full_mode);
  Config c = task_config(task, steps, protocol);
  c.set_override("run.seed=" + std::to_string(seed));
  // "hybrid-batch" is hybrid mode verifying every predicted step on its own batch instead of
  // on the held-out probe, so both verification schemes are measured side by side.
  const bool hybrid = mode == "hybrid" || mode == "hybrid-batch";
  // "plain-average" is plain mode evaluating an exponential average of its weights
  // (train.average_decay, --average-decay): what averaging the trajectory is worth in time.
  const bool average = mode == "plain-average";
  // "snoo" is Lookahead with outer Nesterov momentum (SNOO), at the setting that did best over
  // both tasks in a screen of 18 settings on the MLP and 10 on the GPT
  // (bench/results/snoo_screen.log): k 10, outer lr 0.3, momentum 0.7. Its steady outer step alpha / (1 - momentum) = 1 keeps the
  // trajectory's drift and damps the noise around it; above 1 it diverged or missed the target.
  const bool snoo = mode == "snoo";
  const std::string model = nowcast_model_of(mode);
  const bool nowcast = !model.empty();
  const std::string variant = nowcast && mode.size() > model.size() ? mode.substr(model.size() + 1) : "";
  c.set_override(std::string("run.mode=") +
                 (hybrid ? "hybrid" : average ? "plain" : snoo ? "lookahead" : nowcast ? "nowcast" : mode));
  if (nowcast) {
    c.set_override("nowcast.model=" + model);
    // Unverified, as NiNo runs: verified right after the jump, every far jump is undone and the
    // optimizer's state after a kept one would never be measured.
    if (variant == "reset" || variant == "rescale") {
      c.set_override("nowcast.optimizer_state=" + variant);
      c.set_override("nowcast.verify=false");
    }
    else if (variant == "noverify") c.set_override("nowcast.verify=false");
    else if (variant == "search") c.set_override("nowcast.horizon_search=5");
    else if (variant == "late" || variant == "long" || variant == "span") {}  // below, once nowcast.period is final
    else if (variant == "span-horizon") c.set_override("nowcast.tolerance_by_horizon=true");
    else if (variant == "span-half") c.set_override("nowcast.jump_scale=0.5");
    else if (variant == "span-held") c.set_override("nowcast.probe_holdout=true");
    else if (variant == "span-power" || variant == "span-sched") {
      c.set_override("nowcast.probe_holdout=true");
      c.set_override("nowcast.plain_model=power");
      if (variant == "span-sched") c.set_override("nowcast.horizon_by_schedule=true");
    }
    else if (variant == "span-keep") {
      c.set_override("nowcast.probe_holdout=true");
      c.set_override("nowcast.keep_progress=true");
    }
    else if (!variant.empty()) throw std::invalid_argument("unknown nowcast mode '" + mode + "'");
  }
  if (mode == "hybrid-batch") c.set_override("hybrid.verify=batch");
  if (average) c.set_override(fmt::format("train.average_decay={}", average_decay));
  if (snoo)
    for (auto kv : {"lookahead.k=10", "lookahead.alpha=0.3", "lookahead.momentum=0.7"}) c.set_override(kv);
  for (const auto& kv : extra)  // hybrid.* and nowcast.* only where they apply
    if ((kv.rfind("hybrid.", 0) != 0 || hybrid) && (kv.rfind("nowcast.", 0) != 0 || nowcast)) c.set_override(kv);
  for (const auto& kv : own) c.set_override(kv);  // named on this mode: applied as they are
  // "<nowcaster>-late": delayed verification, each jump judged period / 10 steps after it
  // (unless --set or the mode's own overrides set nowcast.verify_after, here and in the windows below).
  const auto named = [&](const std::string& key) {  // by --set or by the mode's own overrides
    const auto sets = [&](const std::string& kv) { return kv.rfind(key + "=", 0) == 0; };
    return std::any_of(extra.begin(), extra.end(), sets) || std::any_of(own.begin(), own.end(), sets);
  };
  const bool window_set = named("nowcast.verify_after");
  // "<nowcaster>-long": the longest window inside a recording interval (period / 5 - 1 steps).
  // "<nowcaster>-span": period / 4 steps, past the next recorded state (on FM-16 unverified WNN+
  // runs are ahead of plain 250 steps after each jump, not after 100). Both on a 16-batch
  // probe, whose noise is below the margins the verdict weighs.
  const int64_t period = c.get_int("nowcast.period");
  if (variant == "late" && !window_set) c.set_override(fmt::format("nowcast.verify_after={}", period / 10));
  // "<nowcaster>-span-horizon": the same with the tolerance scaled by the jump's horizon.
  // "<nowcaster>-span-half": the same with each jump half the predicted change (nowcast.jump_scale).
  // "<nowcaster>-span-held": the same judged on the probe split (data held out of training).
  // "<nowcaster>-span-keep": span-held keeping failed jumps that still made progress
  // (nowcast.keep_progress). "<nowcaster>-span-power": span-held with plain's progress guessed
  // by a power of the step fitted to its first states (nowcast.plain_model=power).
  // "<nowcaster>-span-sched": span-power with each k read as plain's steps ahead under the
  // learning-rate schedule (nowcast.horizon_by_schedule).
  if (variant == "long" || variant == "span" || variant == "span-horizon" || variant == "span-half" ||
      variant == "span-held" || variant == "span-keep" || variant == "span-power" || variant == "span-sched") {
    if (!window_set)  // a --set nowcast.verify_after wins here too (e.g. a shorter period, the same window)
      c.set_override(fmt::format("nowcast.verify_after={}", variant == "long" ? period / 5 - 1 : period / 4));
    if (!named("nowcast.probe_batches")) c.set_override("nowcast.probe_batches=16");
  }
  return c;
}

// One run of one mode. The modes of a seed are stepped side by side, a chunk of steps each in
// turn, so the machine's slow moments (this is a shared VM) fall on all of them alike.
class Run {
 public:
  Run(const std::string& task, const std::string& mode, int64_t seed, int64_t steps, int64_t eval_every,
      const std::vector<std::string>& extra, double average_decay, const std::string& protocol)
      : steps_(steps), evals_(eval_every, steps) {
    Config c = mode_config(task, mode, seed, steps, extra, average_decay, protocol);
    session_ = ht::cli::build_session(c, true);
    ht::TrainerOptions o = ht::cli::trainer_options(c);
    o.checkpoint.dir.clear();  // no disk I/O inside the timed region
    trainer_ = std::make_unique<ht::Trainer>(*session_.objective, *session_.optimizer, *session_.data, o);
    trainer_->set_strategy(ht::cli::build_strategy(c, &session_));
    for (auto& callback : ht::cli::build_callbacks(c, session_)) trainer_->add_callback(callback);
    result_ = RunResult{task, mode, seed, {}, 0, 0};
    result_.curve.push_back(point(0.0));
  }

  bool done() const { return trainer_->step() >= steps_; }

  // Up to n training steps, timed, with the evaluations that fall due (untimed). Tensor bytes
  // are the process's, shared with the other runs alive: this run's peak is a step's peak less
  // what the others hold.
  void advance(int64_t n) {
    const int64_t before = tensor_bytes_now();
    const int64_t others = before - own_bytes_;
    for (int64_t i = 0; i < n && !done(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const ht::StepRecord rec = trainer_->train_step();
      seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      result_.peak_bytes = std::max(result_.peak_bytes, rec.peak_bytes - others);
      // As in Trainer::fit: predicted steps that are later undone never reach a curve.
      const bool verified = !trainer_->strategy() || trainer_->strategy()->at_verified_point();
      if (evals_.evaluate_now(trainer_->step(), verified))
        result_.curve.push_back(point(seconds_));
    }
    own_bytes_ += tensor_bytes_now() - before;
  }

  Point point(double seconds) {
    const ht::EvalRecord e = trainer_->evaluate();
    Point p{trainer_->step(), seconds, e.val_loss, e.accuracy, 0.0, {}};
    // The norms of the weights the loss scored: the average in plain-average mode.
    trainer_->with_evaluated_weights([&] {
      torch::NoGradGuard no_grad;
      double total = 0;
      for (const auto& item : session_.objective->module().named_parameters()) {
        const double norm = item.value().norm().item<double>();
        p.tensor_norms.emplace_back(item.key(), norm);
        total += norm * norm;
      }
      p.weight_norm = std::sqrt(total);
    });
    return p;
  }
  void add_own_bytes(int64_t bytes) { own_bytes_ += bytes; }

  RunResult finish() {
    if (auto* strategy = trainer_->strategy()) strategy->on_finish(*trainer_);
    if (const auto* hybrid = dynamic_cast<const ht::HybridStrategy*>(trainer_->strategy())) {
      result_.predicted_applied = hybrid->summary().predicted_applied;
      result_.predicted_kept = hybrid->summary().predicted_kept;
    }
    if (const auto* nowcast = dynamic_cast<const ht::NowcastStrategy*>(trainer_->strategy())) {
      const ht::NowcastSummary& n = nowcast->summary();
      result_.predicted_applied = n.jumps;
      result_.predicted_kept = n.kept;
      result_.nowcast_ms = n.setup_ms + n.predict_ms + n.probe_ms + n.record_ms;
      result_.nowcast_summary = n.to_string();
    }
    result_.total_seconds = seconds_;
    return result_;
  }

 private:
  int64_t steps_;
  ht::EvalSchedule evals_;
  ht::cli::Session session_;
  std::unique_ptr<ht::Trainer> trainer_;
  RunResult result_;
  double seconds_ = 0;
  int64_t own_bytes_ = 0;  // tensor bytes this run holds (its model, optimizer, state, data)
};

std::unique_ptr<Run> start_run(const std::string& task, const std::string& mode, int64_t seed, int64_t steps,
                               int64_t eval_every, const std::vector<std::string>& extra, double average_decay,
                               const std::string& protocol) {
  const int64_t before = tensor_bytes_now();
  auto run = std::make_unique<Run>(task, mode, seed, steps, eval_every, extra, average_decay, protocol);
  run->add_own_bytes(tensor_bytes_now() - before);
  return run;
}

// First point at or below the target, linearly interpolated between evaluations.
std::pair<double, double> to_target(const std::vector<Point>& curve, double target) {
  for (size_t i = 1; i < curve.size(); ++i) {
    if (curve[i].val_loss <= target) {
      const Point& a = curve[i - 1];
      const Point& b = curve[i];
      const double f = a.val_loss == b.val_loss ? 1.0 : (a.val_loss - target) / (a.val_loss - b.val_loss);
      return {a.seconds + f * (b.seconds - a.seconds), a.step + f * (b.step - a.step)};
    }
  }
  return {NAN, NAN};
}

// Validation loss of the last evaluation done by `seconds` of training.
double loss_at_seconds(const std::vector<Point>& curve, double seconds) {
  double loss = curve.front().val_loss;
  for (const auto& p : curve)
    if (p.seconds <= seconds) loss = p.val_loss;
  return loss;
}

// A run that never reached the target counts as infinitely slow (speedup 0), not as missing:
// otherwise one lucky seed out of three would stand for the mode.
double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  for (double& x : v)
    if (std::isnan(x)) x = 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int main(int argc, char** argv) {
  std::vector<std::string> tasks = {"mlp", "gpt", "cnn"};
  std::vector<std::string> all_modes = {"plain", "hybrid", "hybrid-batch", "lookahead", "snoo", "plain-average"};
  for (const auto& spec : ht::nowcaster_registry())  // every nowcaster with every variant Run knows
    for (const std::string variant : {"", "-reset", "-rescale", "-noverify", "-search", "-late", "-long", "-span",
                                      "-span-horizon", "-span-half", "-span-held", "-span-keep", "-span-power",
                                      "-span-sched"})
      all_modes.push_back(spec.name + variant);
  std::vector<std::string> modes = {"plain", "hybrid", "hybrid-batch", "lookahead", "snoo", "plain-average"};
  int64_t seeds = 3, first_seed = 1, mlp_steps = 940, gpt_steps = 600, cnn_steps = 470, eval_points = 20, chunk = 10;
  int64_t fm16_steps = 10000, gpt_wide_steps = 3000, threads = 2;
  std::string protocol = "cosine";
  std::string target_rule = "at80";
  std::string out_dir = "bench/results";
  double average_decay = 0.97;
  std::vector<std::string> extra;
  CLI::App app{"plain vs hybrid vs Lookahead: wall-clock to a target validation loss"};
  app.add_option("--tasks", tasks, "mlp gpt cnn fm16 gpt-wide");
  app.add_option("--protocol", protocol, "cosine (warmup + cosine at the tuned rates) or nino (constant rate, no warmup)")
      ->check(CLI::IsMember({"cosine", "nino"}));
  app.add_option("--target", target_rule,
                 "at80: plain's validation loss at the evaluation nearest 80 % of its budget (the earlier records); "
                 "best80: plain's best validation loss within 80 % of its budget (record v2)")
      ->check(CLI::IsMember({"at80", "best80"}));
  app.add_option("--fm16-steps", fm16_steps);
  app.add_option("--threads", threads,
                 "intra-op threads for every run (2 in the earlier records; 1 on a machine shared with other "
                 "jobs, where 2 OpenMP threads spin and collapse)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--gpt-wide-steps", gpt_wide_steps);
  app.add_option("--modes", modes,
                 "plain hybrid hybrid-batch lookahead snoo plain-average, or a nowcaster (wnn nino own ...) alone or with "
                 "-reset -rescale -noverify -search -late -long -span -span-horizon -span-half -span-held -span-keep -span-power "
                 "-span-sched (plain is required: it sets the target); any mode may add its own config overrides after '@', "
                 "e.g. nino-span-power@nowcast.tolerance=0.05, to run beside the same mode without them")
      ->check(CLI::Validator(
          [&all_modes](std::string& mode) -> std::string {
            const ModeSpec spec = split_mode(mode);
            if (std::find(all_modes.begin(), all_modes.end(), spec.base) == all_modes.end())
              return "unknown mode '" + spec.base + "' (see --help for the modes)";
            if (mode.find(',') != std::string::npos)
              return "mode '" + mode + "' has a comma: it would split the CSV's mode column";
            for (const auto& kv : spec.overrides)
              if (kv.find('=') == std::string::npos || kv.front() == '=')
                return "mode '" + mode + "': '" + kv + "' after '@' is not key=value (e.g. " + spec.base +
                       "@nowcast.tolerance=0.05)";
            return "";
          },
          "MODE[@key=value...]"));
  app.add_option("--average-decay", average_decay, "train.average_decay of the plain-average mode");
  app.add_option("--seeds", seeds, "how many seeds")->check(CLI::Range(1, 1000));
  app.add_option("--first-seed", first_seed,
                 "seeds run first_seed .. first_seed + seeds - 1 (a later range checks settings chosen on seeds 1-3)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--mlp-steps", mlp_steps);
  app.add_option("--gpt-steps", gpt_steps);
  app.add_option("--cnn-steps", cnn_steps);
  app.add_option("--eval-points", eval_points, "evaluations per run");
  app.add_option("--chunk", chunk, "steps each mode takes in turn (the modes of a seed run side by side)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--out", out_dir);
  app.add_option("--set", extra, "extra config overrides for every mode (hybrid.* only for hybrid modes, nowcast.* only for "
                                 "nowcast modes), e.g. --set hybrid.predictor=dmd");
  CLI11_PARSE(app, argc, argv);
  if (std::find(modes.begin(), modes.end(), "plain") == modes.end()) {
    std::fprintf(stderr, "hybrid_bench: --modes must include plain (its curve sets the target)\n");
    return 2;
  }
  for (size_t i = 0; i < modes.size(); ++i)
    if (std::find(modes.begin() + i + 1, modes.end(), modes[i]) != modes.end()) {
      std::fprintf(stderr, "hybrid_bench: --modes names %s twice (its results would overwrite each other)\n", modes[i].c_str());
      return 2;
    }

  // Bad --set keys or values fail here, in a second, not after the first hour of runs.
  try {
    for (const auto& task : tasks) {
      if (!known_task(task))
        throw std::invalid_argument("unknown task '" + task + "' in --tasks (use mlp, gpt, cnn, fm16, gpt-wide)");
      // Each mode as it will run (a --set may lean on the mode's own overrides, e.g.
      // nowcast.power_level_states on -span-power's plain_model); hybrid and nowcast mode with the
      // --set alone where no such mode runs, so that a bad hybrid.* or nowcast.* value still fails.
      auto runs_as = [&](const std::string& kind) {
        return std::any_of(modes.begin(), modes.end(), [&](const std::string& m) {
          return kind == "nowcast" ? !nowcast_model_of(m).empty() : m.rfind("hybrid", 0) == 0;
        });
      };
      for (const std::string mode : {"hybrid", "nowcast"}) {
        if (runs_as(mode)) continue;
        Config c = task_config(task, 100, protocol);
        c.set_override("run.mode=" + mode);
        for (const auto& kv : extra) c.set_override(kv);
        ht::cli::build_strategy(c);
      }
      for (const auto& mode : modes) ht::cli::build_strategy(mode_config(task, mode, 1, 10000, extra, average_decay, protocol));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid_bench: %s\n", e.what());
    return 2;
  }

  ht::install_tracking_allocator();
  ht::set_threads(static_cast<int>(threads));
  std::printf("cpu: %s, threads %lld\n", ht::cpu_model().c_str(), static_cast<long long>(threads));
  fs::create_directories(out_dir);
  std::ofstream curves(out_dir + "/hybrid_curves.csv"), summary(out_dir + "/hybrid_summary.csv");
  std::ofstream norms(out_dir + "/hybrid_norms.csv");
  curves << "task,mode,seed,step,seconds,val_loss,val_accuracy,weight_norm\n";
  norms << "task,mode,seed,step,tensor,norm\n";
  summary << "task,protocol,mode,seed,target,seconds_to_target,steps_to_target,speedup_vs_plain,step_ratio_vs_plain,"
             "val_loss_at_plain_seconds,final_val_loss,best_val_loss,total_seconds,nowcast_seconds,peak_mib,"
             "predicted_applied,predicted_kept\n";

  // A run can still fail on what only its data shows (e.g. a probe split smaller than
  // nowcast.probe_batches): a named error and exit 2, the finished seeds' rows already written.
  try {
    for (const auto& task : tasks) {
      const int64_t steps = task == "gpt"        ? gpt_steps
                            : task == "mlp"      ? mlp_steps
                            : task == "fm16"     ? fm16_steps
                            : task == "gpt-wide" ? gpt_wide_steps
                                                 : cnn_steps;
      const int64_t eval_every = std::max<int64_t>(1, steps / eval_points);
      std::map<std::string, std::vector<double>> speedups, step_ratios, final_losses;
      // An untimed warm-up run first: the first run of a process pays for page faults, the
      // allocator's cold cache and lazy initialisation, which would otherwise count against plain.
      // It stays alive, so a data set the runs share (Fashion-MNIST is loaded once per process)
      // is held by none of them and counts in no run's peak.
      auto warm_up = start_run(task, "plain", 0, std::min<int64_t>(steps, 60), steps, extra, average_decay, protocol);
      while (!warm_up->done()) warm_up->advance(chunk);
      for (int64_t seed = first_seed; seed < first_seed + seeds; ++seed) {
        ht::release_cached_blocks();
        std::vector<std::unique_ptr<Run>> live;
        for (const auto& mode : modes)
          live.push_back(start_run(task, mode, seed, steps, eval_every, extra, average_decay, protocol));
        // Lockstep: each round, every mode takes `chunk` steps, the first mode rotating each round.
        for (size_t round = 0;; ++round) {
          bool any = false;
          for (size_t j = 0; j < live.size(); ++j) {
            Run& r = *live[(j + round) % live.size()];
            if (r.done()) continue;
            r.advance(chunk);
            any = true;
          }
          if (!any) break;
        }
        std::map<std::string, RunResult> runs;
        for (size_t j = 0; j < live.size(); ++j) {
          const std::string& mode = modes[j];
          runs[mode] = live[j]->finish();
          for (const auto& p : runs[mode].curve) {
            curves << fmt::format("{},{},{},{},{:.4f},{:.6f},{:.6f},{:.6f}\n", task, mode, seed, p.step, p.seconds,
                                  p.val_loss, p.val_accuracy, p.weight_norm);
            for (const auto& [name, norm] : p.tensor_norms)
              norms << fmt::format("{},{},{},{},{},{:.6f}\n", task, mode, seed, p.step, name, norm);
          }
        }
        live.clear();
        curves.flush();
        norms.flush();
        const RunResult& plain = runs.at("plain");
        // Target: plain's validation loss at the evaluation nearest 80 % of its budget (at80), or
        // its best validation loss up to there (best80).
        double target = plain.curve.back().val_loss;
        if (target_rule == "best80") target = INFINITY;
        for (const auto& p : plain.curve)
          if (p.step > 0 && p.step <= static_cast<int64_t>(0.8 * steps))
            target = target_rule == "best80" ? std::min(target, p.val_loss) : p.val_loss;
        const auto [plain_seconds, plain_steps] = to_target(plain.curve, target);
        for (const auto& mode : modes) {
          const RunResult& r = runs.at(mode);
          const auto [sec, st] = to_target(r.curve, target);
          const double speedup = plain_seconds / sec;
          speedups[mode].push_back(speedup);
          step_ratios[mode].push_back(plain_steps / st);
          final_losses[mode].push_back(r.curve.back().val_loss);
          double best = r.curve.back().val_loss;
          for (const auto& p : r.curve) best = std::min(best, p.val_loss);
          summary << fmt::format("{},{},{},{},{:.6f},{:.3f},{:.1f},{:.3f},{:.3f},{:.6f},{:.6f},{:.6f},{:.3f},{:.3f},{:.1f},{},{}\n",
                                 task, protocol, mode, seed, target, sec, st, speedup, plain_steps / st,
                                 loss_at_seconds(r.curve, plain.total_seconds), r.curve.back().val_loss, best,
                                 r.total_seconds, r.nowcast_ms / 1000.0, r.peak_bytes / 1048576.0,
                                 r.predicted_applied, r.predicted_kept);
          const std::string kept = r.predicted_applied > 0 ? fmt::format("; kept {} of {} predicted updates",
                                                                           r.predicted_kept, r.predicted_applied)
                                                         : std::string();
          const std::string reached = std::isfinite(sec) ? fmt::format("{:7.2f} s, {:6.0f} steps to target ({:.2f}x plain)", sec, st, speedup)
                                                         : std::string("never reached the target");
          std::printf("%s seed %lld %-12s target %.4f: %s; final %.4f in %.1f s; peak %.1f MiB%s\n", task.c_str(),
                      static_cast<long long>(seed), mode.c_str(), target, reached.c_str(), r.curve.back().val_loss,
                      r.total_seconds, r.peak_bytes / 1048576.0, kept.c_str());
          if (!r.nowcast_summary.empty()) std::printf("  %s\n", r.nowcast_summary.c_str());
          std::fflush(stdout);
        }
        summary.flush();
      }
      for (const auto& mode : modes) {
        const auto& s = speedups[mode];
        const auto reached = std::count_if(s.begin(), s.end(), [](double x) { return !std::isnan(x); });
        const double med = median(s);
        auto text = [](double x) { return x > 0.0 ? fmt::format("{:.2f}x", x) : std::string("never"); };
        double lo = INFINITY, hi = 0.0;
        for (double x : s) {
          lo = std::min(lo, std::isnan(x) ? 0.0 : x);
          hi = std::max(hi, std::isnan(x) ? 0.0 : x);
        }
        std::printf("== %s %s %-12s median speedup to target %s (min %s, max %s; in steps %s), reached in %lld of %zu seeds, "
                    "median final val loss %.4f\n",
                    task.c_str(), protocol.c_str(), mode.c_str(), text(med).c_str(), text(lo).c_str(), text(hi).c_str(),
                    text(median(step_ratios[mode])).c_str(), static_cast<long long>(reached), s.size(),
                    median(final_losses[mode]));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid_bench: %s\n", e.what());
    return 2;
  }
  std::printf("curves: %s/hybrid_curves.csv (loss, accuracy, weight norm; each tensor's norm in hybrid_norms.csv), summary: %s/hybrid_summary.csv; plots: bench/plot_hybrid.sh\n",
              out_dir.c_str(), out_dir.c_str());
  return 0;
}
