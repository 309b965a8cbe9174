// nowcast-meta: builds a trajectory corpus from this project's own runs and meta-trains a WNN+-shaped
// nowcaster on it (`build`, one command); scores it on the unseen benchmark tasks (`eval`); tunes it
// through the task's loss (`tune`); measures what its jumps are worth after the optimizer's correction (`scan`).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include "corpus.h"
#include "evaluate.h"
#include "scan.h"
#include "tune.h"
#include "hybrid/core/errors.h"
#include "hybrid/core/runtime.h"
#include "hybrid/hybrid/nowcast_meta.h"
#include "hybrid/hybrid/nowcaster_registry.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct BuildArgs {
  ht::meta::CorpusScale scale;
  ht::MetaTrainOptions train;
  int64_t holdout_every = 8;  // every n-th run is held out of training and scored
  std::string out = std::string(HT_SOURCE_DIR) + "/models/own/own_wnn.safetensors";
  std::string corpus_out;
  std::vector<std::string> corpus_in;  // several: their runs together (e.g. the default corpus + GPTs)
  std::string work_dir = "runs/nowcast-meta";
  std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
};

// --quick: a few-second preset for the test suite (options given beside it still apply).
void quick_build(BuildArgs& a) {
  a.scale.runs = 3;
  a.scale.states = 12;
  a.scale.max_scalars = 256;
  a.scale.interval_scale = 0.1;
  a.train.steps = 40;
  a.train.windows = 16;
  a.train.scalars = 32;
  a.holdout_every = 0;
}

int build(BuildArgs a, const std::string& command_line) {
  std::filesystem::create_directories(a.work_dir);
  const auto t_all = Clock::now();
  std::vector<ht::Trajectory> corpus;
  double corpus_s = 0.0;
  if (!a.corpus_in.empty()) {
    for (const auto& path : a.corpus_in) {
      auto part = ht::load_trajectories(path);
      std::printf("corpus: %zu trajectories read from %s\n", part.size(), path.c_str());
      corpus.insert(corpus.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
  } else {
    const std::string text = a.work_dir + "/common-licenses.txt";
    ht::meta::write_license_text(text);
    const auto tasks = ht::meta::corpus_tasks(a.scale);
    const auto t0 = Clock::now();
    for (size_t r = 0; r < tasks.size(); ++r) {
      const auto tr = Clock::now();
      corpus.push_back(ht::meta::record_task(tasks[r], a.scale.max_scalars, a.fashion_mnist_dir, text));
      std::printf("run %zu/%zu (%.1f s): %s\n", r + 1, tasks.size(), seconds_since(tr), tasks[r].describe().c_str());
      std::fflush(stdout);
    }
    corpus_s = seconds_since(t0);
    std::printf("corpus: %zu runs recorded in %.1f s\n", corpus.size(), corpus_s);
    if (!a.corpus_out.empty()) ht::save_trajectories(a.corpus_out, corpus);
  }
  std::vector<ht::Trajectory> train, held;
  for (size_t r = 0; r < corpus.size(); ++r)
    (a.holdout_every > 0 && static_cast<int64_t>(r % a.holdout_every) == a.holdout_every - 1 ? held : train)
        .push_back(corpus[r]);
  const auto t1 = Clock::now();
  const int64_t every = std::max<int64_t>(1, a.train.steps / 20);
  const auto result = ht::meta_train_wnn_plus(train, a.train, [&](int64_t step, double loss, double lr) {
    if (step % every == 0 || step == 1)
      std::printf("meta step %ld/%ld: L1 %.4f (lr %.2e, %.1f s)\n", static_cast<long>(step),
                  static_cast<long>(a.train.steps), loss, lr, seconds_since(t1));
    std::fflush(stdout);
  });
  const double train_s = seconds_since(t1);
  const int64_t n = static_cast<int64_t>(result.losses.size()), w = std::max<int64_t>(1, n / 10);
  double first = 0, last = 0;
  for (int64_t i = 0; i < w; ++i) first += result.losses[i] / w, last += result.losses[n - 1 - i] / w;
  std::printf("meta-training: %ld steps in %.1f s; L1 first tenth %.4f, last tenth %.4f\n", static_cast<long>(n),
              train_s, first, last);
  std::string held_text = "none";
  if (!held.empty()) {
    const double trained = ht::meta_eval_loss(result.weights, held, a.train, 50, 7);
    auto none = result.weights;  // a zero output layer (the untrained start) predicts "no jump"
    none["edge_mlp.fc.6.weight"] = torch::zeros_like(none["edge_mlp.fc.6.weight"]);
    none["edge_mlp.fc.6.bias"] = torch::zeros_like(none["edge_mlp.fc.6.bias"]);
    const double baseline = ht::meta_eval_loss(none, held, a.train, 50, 7);
    held_text = fmt::format("{} held-out runs: L1 {:.4f} (no jump {:.4f})", held.size(), trained, baseline);
    std::printf("%s\n", held_text.c_str());
  }
  int64_t min_states = corpus.empty() ? 0 : corpus.front().states(), max_states = min_states;
  for (const auto& t : corpus) min_states = std::min(min_states, t.states()), max_states = std::max(max_states, t.states());
  if (const auto dir = std::filesystem::path(a.out).parent_path(); !dir.empty())  // "--out x.safetensors": here
    std::filesystem::create_directories(dir);
  ht::save_wnn_plus(a.out, result.weights,
                    {{"model_args", fmt::format("{{\"gnn\": false, \"hid\": {}, \"seq_len\": {}, \"ctx\": 5}}",
                                                a.train.hidden, a.train.horizons)},
                     {"trained_by", command_line},
                     {"corpus", fmt::format("{} runs ({} trained on), {}-{} states each", corpus.size(), train.size(),
                                            min_states, max_states)},
                     {"held_out", held_text}});
  // The file must load as the nowcast mode loads it, and predict finite weights.
  auto check = ht::load_wnn_plus(a.out, ht::nowcast_spec_feedforward({{"fc.weight", {4, 3}}, {"fc.bias", {4}}}));
  std::vector<std::vector<at::Tensor>> states(2);
  for (int t = 0; t < ht::kNowcastContext; ++t) {
    states[0].push_back(torch::randn({4, 3}) + 0.1 * t);
    states[1].push_back(torch::randn({4}) - 0.1 * t);
  }
  for (const auto& p : check->predict(states, check->max_horizon()))
    if (!torch::isfinite(p).all().item<bool>()) throw std::runtime_error(a.out + " predicts non-finite weights");
  std::printf("wrote %s (loads through load_wnn_plus, %ld horizons); corpus %.1f s, meta-training %.1f s, total %.1f s\n",
              a.out.c_str(), static_cast<long>(check->max_horizon()), corpus_s, train_s, seconds_since(t_all));
  return 0;
}

struct TuneArgs {
  std::string from = std::string(HT_SOURCE_DIR) + "/models/own/own_wnn_gpt.safetensors";
  std::string out = std::string(HT_SOURCE_DIR) + "/models/own/own_wnn_gpt_loss.safetensors";
  ht::meta::CorpusScale scale;
  int64_t held = 2;    // the last `held` drawn runs are not tuned on, only scored
  int64_t probes = 4;  // validation batches per run the loss is probed on
  ht::LossTuneOptions tune;
  std::string work_dir = "runs/nowcast-meta";
  std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
};

// --quick: a few-second preset for the test suite (options given beside it still apply).
void quick_tune(TuneArgs& a) {
  a.scale.runs = 1;
  a.scale.gpt_size = "small";  // 1-3 x 32-64: its predictions cost milliseconds, not a second
  a.scale.states = 7;
  a.scale.interval_scale = 0.05;
  a.held = 1;
  a.probes = 1;
  a.tune.steps_per_run = 4;
  a.tune.grad_scalars = 256;
}

int tune(TuneArgs a, const std::string& command_line) {
  if (a.held < 0 || a.probes < 1) throw ht::OptionsError("tune: --held must be >= 0 and --probes >= 1");
  std::filesystem::create_directories(a.work_dir);
  const auto t_all = Clock::now();
  const std::string text = a.work_dir + "/common-licenses.txt";
  ht::meta::write_license_text(text);
  const int64_t tuned_runs = a.scale.runs;
  a.scale.runs += a.held;  // drawn together, so the held-out runs differ from the tuned ones
  const auto tasks = ht::meta::corpus_tasks(a.scale);
  const auto start_weights = ht::read_wnn_plus(a.from);
  ht::LossTuner tuner(start_weights, a.tune);
  const ht::LossTuner start(start_weights, a.tune);  // scores only
  std::printf("cpu: %s\ntuning %s on %ld runs, %ld meta steps each (loss weight %g, L1 weight %g, lr %g, loss read %ld "
              "optimizer steps after the prediction)\n",
              ht::cpu_model().c_str(), a.from.c_str(), static_cast<long>(tuned_runs), static_cast<long>(a.tune.steps_per_run),
              a.tune.loss_weight, a.tune.l1_weight, a.tune.lr, static_cast<long>(a.tune.recover_steps));
  for (int64_t r = 0; r < tuned_runs; ++r) {
    const auto t0 = Clock::now();
    ht::meta::with_recorded_run(tasks[r], a.fashion_mnist_dir, text, a.probes, [&](const ht::LossTuneRun& run) {
      const double trained_s = seconds_since(t0);
      double first = 0, last = 0;
      const auto steps = tuner.tune(run);
      const size_t half = steps.size() / 2;
      for (size_t i = 0; i < steps.size(); ++i)
        (i < half ? first : last) += steps[i].loss_pred / steps[i].loss_now / static_cast<double>(i < half ? half : steps.size() - half);
      std::printf("run %ld/%ld (%.0f s training, %.0f s tuning): %s\n  loss there / loss at state t: %.4f first half, %.4f second half\n",
                  static_cast<long>(r + 1), static_cast<long>(tuned_runs), trained_s, seconds_since(t0) - trained_s,
                  tasks[r].describe().c_str(), half ? first : NAN, last);
      std::fflush(stdout);
    });
  }
  std::string held_text = "none", table;
  double ratio_start = 0, ratio_tuned = 0;
  for (int64_t h = 0; h < a.held; ++h) {
    const auto& task = tasks[tuned_runs + h];
    ht::meta::with_recorded_run(task, a.fashion_mnist_dir, text, a.probes, [&](const ht::LossTuneRun& run) {
      const auto score = ht::meta::score_held_out(start, tuner, run, "held-out " + std::to_string(h + 1));
      ratio_start += score.ratio_start / a.held, ratio_tuned += score.ratio_tuned / a.held;
      table += score.table;
    });
    std::printf("held-out run %ld: %s\n", static_cast<long>(h + 1), task.describe().c_str());
  }
  if (a.held > 0) {
    std::printf("\nvalidation loss on the held-out runs (mean of %ld probe batches) now and at the predictions, both after %ld "
                "optimizer steps\n"
                "| run | state | k | loss now | start weights | tuned weights |\n|---|---|---|---|---|---|\n%s",
                static_cast<long>(a.probes), static_cast<long>(a.tune.recover_steps), table.c_str());
    held_text = fmt::format("{} held-out runs: loss at prediction / loss now {:.4f} (start weights {:.4f})", a.held,
                            ratio_tuned, ratio_start);
    std::printf("%s\n", held_text.c_str());
  }
  const auto weights = tuner.weights();
  ht::save_wnn_plus(a.out, weights,
                    {{"model_args", fmt::format("{{\"gnn\": false, \"hid\": {}, \"seq_len\": {}, \"ctx\": 5}}",
                                                weights.at("edge_mlp.fc.0.weight").size(0),
                                                weights.at("edge_mlp.fc.6.weight").size(0))},
                     {"trained_by", command_line},
                     {"tuned_from", a.from},
                     {"held_out", held_text}});
  ht::load_wnn_plus(a.out, ht::nowcast_spec_feedforward({{"fc.weight", {4, 3}}}));  // loads as a jump loads it
  std::printf("wrote %s in %.1f s\n", a.out.c_str(), seconds_since(t_all));
  return 0;
}

struct EvalArgs {
  std::string own = std::string(HT_SOURCE_DIR) + "/models/own/own_wnn.safetensors";
  std::string wnn = std::string(HT_SOURCE_DIR) + "/models/nino/nino_mlp.safetensors";
  std::string tasks = "fm16,gpt-tiny-kjv";
  int64_t fm16_interval = 200, fm16_states = 45, gpt_interval = 40, gpt_states = 45;
  std::string log;
  std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
};

int eval(const EvalArgs& a, int threads) {
  std::string out = fmt::format("cpu: {}, threads {}\nown: {}\nreleased WNN+: {}\n", ht::cpu_model(), threads, a.own, a.wnn);
  std::printf("%s", out.c_str());
  for (std::string rest = a.tasks + ","; rest.find(',') != std::string::npos;) {
    const std::string name = rest.substr(0, rest.find(','));
    rest = rest.substr(rest.find(',') + 1);
    if (name.empty()) continue;
    ht::meta::EvalTask task;
    task.name = name;
    task.interval = name == "fm16" ? a.fm16_interval : a.gpt_interval;
    task.states = name == "fm16" ? a.fm16_states : a.gpt_states;
    const auto t0 = Clock::now();
    const auto rows = ht::meta::evaluate_task(task, a.own, a.wnn, a.fashion_mnist_dir, [](const std::string& line) {
      std::printf("  %s\n", line.c_str());
      std::fflush(stdout);
    });
    std::string table = fmt::format(
        "\n{}: AdamW constant, a state every {} steps (period {}), {} states, {:.0f} s\n"
        "normalised MSE to the real future weights (mean over tensors) and validation loss at the weights\n"
        "| step | k | nMSE no jump | nMSE WNN+ | nMSE own | loss now | loss WNN+ | loss own | loss real future |\n"
        "|---|---|---|---|---|---|---|---|---|\n",
        name, task.interval, 5 * task.interval, task.states, seconds_since(t0));
    for (const auto& r : rows)
      table += fmt::format("| {} | {} | {:.4g} | {:.4g} | {:.4g} | {:.4f} | {:.4f} | {:.4f} | {:.4f} |\n", r.step, r.k,
                           r.nmse_none, r.nmse_wnn, r.nmse_own, r.loss_now, r.loss_wnn, r.loss_own, r.loss_true);
    std::printf("%s", table.c_str());
    out += table;
  }
  if (!a.log.empty()) std::ofstream(a.log) << out;
  return 0;
}


struct ScanArgs {
  // registered nowcasters whose jumps are scanned, each name or name=weights
  std::vector<std::string> models = {"wnn", "own-gpt", "own-gpt-loss"};
  ht::meta::CorpusScale scale;
  std::string task;  // a benchmark task measured instead of drawn runs (seeds first_seed ..)
  int64_t first_seed = 1;
  double task_lr = 0.0;  // with task: its constant rate instead of the task's own (0: the task's)
  ht::meta::ScanGrid grid;
  std::vector<std::string> parts;  // JumpKinds texts (empty: all)
  std::vector<int64_t> at;  // recorded states jumped from (default: the 5th and the middle of the rest)
  int64_t probes = 16;  // the jump's and no jump's losses differ by ~1 %: more than tune's 4
  std::string work_dir = "runs/nowcast-meta";
  std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
  std::string dump_dir;  // per run and state: the recorded context and the futures (safetensors)
};

// --quick: a few-second preset for the test suite (options given beside it still apply).
void quick_scan(ScanArgs& a) {
  a.scale.runs = 1;
  a.scale.gpt_size = "small";
  a.scale.states = 7;
  a.scale.interval_scale = 0.05;
  a.grid.horizons = {1, 10};
  a.grid.scales = {0.0, 1.0};
  a.grid.recover_steps = 3;
  a.probes = 1;
  a.models.resize(1);
}

int scan(ScanArgs a) {
  if (a.probes < 1 || a.grid.recover_steps < 1 || a.grid.horizons.empty() || a.grid.scales.empty())
    throw ht::OptionsError("scan: --probes and --recover-steps must be >= 1, --horizons and --scales not empty");
  if (a.task_lr != 0.0 && (a.task.empty() || !(a.task_lr > 0.0)))
    throw ht::OptionsError("scan: --lr " + std::to_string(a.task_lr) +
                           ": a benchmark task's rate, so it needs --task and must be above 0 (drawn runs draw theirs)");
  if (a.grid.oracle_futures < 1 || std::any_of(a.grid.oracle_steps.begin(), a.grid.oracle_steps.end(), [](int64_t d) { return d < 1; }))
    throw ht::OptionsError("scan: --oracle-steps must be >= 1 each and --oracle-futures >= 1");
  if ((!a.grid.oracle_blends.empty() || a.grid.trend || !a.grid.lookahead.empty() || !a.dump_dir.empty()) &&
      a.grid.oracle_steps.empty())
    throw ht::OptionsError(
        "scan: --oracle-blends, --trend, --lookahead and --dump-dir need --oracle-steps (the futures they are measured against)");
  if (std::any_of(a.grid.averages.begin(), a.grid.averages.end(), [](int64_t h) { return h < 1; }))
    throw ht::OptionsError("scan: --averages are half-lives in optimizer steps, each >= 1");
  for (const int64_t s : a.grid.lookahead)
    if (s < 1 || s >= *std::max_element(a.grid.oracle_steps.begin(), a.grid.oracle_steps.end()))
      throw ht::OptionsError(fmt::format("scan: --lookahead {} is not in 1 .. the largest --oracle-steps - 1 (a look shorter than the jump)", s));
  for (const double b : a.grid.oracle_blends)
    if (!(b > 0.0 && b <= 1.0))
      throw ht::OptionsError(fmt::format("scan: --oracle-blends {} is not in (0, 1] (1: the oracle's mean itself)", b));
  if (!a.parts.empty()) {
    a.grid.parts.clear();
    for (const auto& p : a.parts) a.grid.parts.push_back(ht::JumpKinds::parse(p));  // before any training
  }
  for (const int64_t t : a.at)  // before any training: a run records --states states, 0 .. states - 1
    if (t < ht::kNowcastContext - 1 || t >= a.scale.states)
      throw ht::OptionsError(fmt::format("scan: --at {} is not a recorded state with a context (4 .. --states - 1 = {})", t,
                                         a.scale.states - 1));
  std::vector<ht::meta::ScanModel> models;
  for (const auto& m : a.models) {  // name or name=weights; checked here, before any training
    const auto eq = m.find('=');
    const ht::NowcasterSpec& spec = ht::find_nowcaster(m.substr(0, eq));
    const std::string weights = eq == std::string::npos ? std::string(HT_SOURCE_DIR) + "/models/" + spec.weights_file
                                                        : m.substr(eq + 1);
    if (!std::ifstream(weights).good())
      throw ht::OptionsError("scan: cannot read " + spec.name + "'s weights \"" + weights + "\" (--models " + m + ")");
    models.push_back({spec.name, weights});
  }
  std::filesystem::create_directories(a.work_dir);
  if (!a.dump_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(a.dump_dir, error);
    if (error) throw ht::OptionsError("scan: --dump-dir " + a.dump_dir + ": cannot create it (" + error.message() + ")");
  }
  const auto t_all = Clock::now();
  const std::string text = a.work_dir + "/common-licenses.txt";
  ht::meta::write_license_text(text);
  std::vector<ht::meta::CorpusTask> tasks;
  if (a.task.empty()) {
    tasks = ht::meta::corpus_tasks(a.scale);
  } else {
    for (int64_t r = 0; r < a.scale.runs; ++r) {
      tasks.push_back(ht::meta::benchmark_task(a.task, a.first_seed + r, a.scale.states, a.scale.optimizer,
                                               a.scale.tokens_path, a.scale.tokens_vocab));
      tasks.back().interval = std::max<int64_t>(1, std::llround(tasks.back().interval * a.scale.interval_scale));
      if (a.task_lr > 0.0) tasks.back().lr = a.task_lr;
    }
  }
  const int64_t N = a.grid.recover_steps;
  std::printf("cpu: %s\njump scan: %zu nowcasters on %zu fresh runs; the loss %ld optimizer steps after each jump "
              "against no jump, on the same batches (mean of up to %ld validation batches)\n",
              ht::cpu_model().c_str(), models.size(), tasks.size(), static_cast<long>(N), static_cast<long>(a.probes));
  std::vector<ht::meta::ScanCell> cells;
  for (size_t r = 0; r < tasks.size(); ++r) {
    const auto t0 = Clock::now();
    std::printf("run %zu/%zu: %s\n", r + 1, tasks.size(), tasks[r].describe().c_str());
    std::fflush(stdout);
    ht::meta::with_recorded_run(tasks[r], a.fashion_mnist_dir, text, a.probes, [&](const ht::LossTuneRun& run) {
      const auto T = static_cast<int64_t>(run.states.size());
      if (run.probes < a.probes)
        std::printf("  its validation split holds %ld batches: the loss is read on those\n", static_cast<long>(run.probes));
      std::vector<int64_t> at = a.at.empty() ? std::vector<int64_t>{ht::kNowcastContext - 1, (ht::kNowcastContext - 1 + T - 1) / 2} : a.at;
      at.erase(std::unique(at.begin(), at.end()), at.end());
      for (const int64_t t : at) {
        const std::string dump =
            a.dump_dir.empty() ? "" : fmt::format("{}/run{}-seed{}_state{}.safetensors", a.dump_dir, r + 1, tasks[r].seed, t);
        const std::string line = ht::meta::scan_state(models, a.grid, run, t, cells, dump);
        std::printf("  state %ld (step %ld): %s\n", static_cast<long>(t), static_cast<long>((t + 1) * tasks[r].interval),
                    line.c_str());
        std::fflush(stdout);
      }
    }, a.grid.averages);
    std::printf("  %.0f s\n", seconds_since(t0));
  }
  std::printf("\n| nowcaster | moved | k | scale | loss at the jump / now | after %ld steps: jump / no jump | lead in steps | rows |\n"
              "|---|---|---|---|---|---|---|---|\n",
              static_cast<long>(N));
  for (const auto& c : cells)
    std::printf("| %s | %s | %ld | %g | %.4f | %.4f | %s | %ld |\n", c.model.c_str(), c.part.c_str(), static_cast<long>(c.k), c.scale,
                c.at_jump / c.rows, c.after / c.rows,
                std::isnan(c.lead_steps(N)) ? "- (plain made no progress)" : fmt::format("{:+.0f}", c.lead_steps(N)).c_str(),
                static_cast<long>(c.rows));
  std::printf("lead in steps: N x (sum of no-jump minus jump loss) / (sum of what N more plain steps gain)\n%s%s"
              "done in %.0f s\n", a.grid.averages.empty() ? "" : "average rows: k is the half-life in steps\n",
              a.grid.oracle_steps.empty() ? "" : "future / futures-mean / trend / lookahead rows: k is D, the optimizer steps plain training took to get there\n",
              seconds_since(t_all));
  return 0;
}

// tune's and scan's fresh runs: by default GPTs of the tiny GPT's scale, 12 states each.
ht::meta::CorpusScale medium_gpt_runs(int64_t runs, uint64_t seed) {
  ht::meta::CorpusScale s;
  s.families = {"gpt"};
  s.gpt_size = "medium";
  s.runs = runs;
  s.states = 12;
  s.seed = seed;
  return s;
}

void add_drawn_run_options(CLI::App* cmd, ht::meta::CorpusScale& s, const std::string& seed_default) {
  cmd->add_option("--families", s.families, "comma list of mlp, cnn, gpt, gpt-words (default gpt)")->delimiter(',');
  cmd->add_option("--tokens", s.tokens_path, "gpt-words: a word-level token file (bench/python/word_tokens.py IN.txt OUT.bin)");
  cmd->add_option("--vocab", s.tokens_vocab, "gpt-words: the token file's vocabulary (default 8192)");
  cmd->add_option("--gpt-size", s.gpt_size, "small or medium (default)");
  cmd->add_option("--states", s.states, "recorded states per run (default 12)");
  cmd->add_option("--interval-scale", s.interval_scale, "multiplies the recording intervals");
  cmd->add_option("--corpus-seed", s.seed, "seed of the drawn runs (default " + seed_default + ")");
  cmd->add_option("--optimizer", s.optimizer, "adamw (default) or muon: the runs' optimizer (muon: GPTs only)");
}

}  // namespace

int main(int argc, char** argv) {
  std::string command_line = "nowcast-meta";
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  CLI::App app{"Meta-trains a WNN+-shaped nowcaster on this project's own training runs (issue 21, item 2c)"};
  app.require_subcommand(1);
  int threads = 1;
  app.add_option("--threads", threads, "intra-op threads (default 1)");
  BuildArgs b;
  auto* build_cmd = app.add_subcommand("build", "record the corpus and meta-train, writing safetensors");
  build_cmd->add_flag("--quick", "a few-second preset (3 short runs, 40 meta steps) for tests");
  // What the corpus runs are; with --corpus-in nothing is recorded, so giving one of these is refused.
  std::vector<CLI::Option*> recording;
  recording.push_back(build_cmd->add_option("--runs", b.scale.runs, "corpus runs (the families in turn)"));
  recording.push_back(
      build_cmd->add_option("--families", b.scale.families, "comma list of mlp, cnn, gpt, gpt-words (default mlp, cnn, gpt)")
          ->delimiter(','));
  recording.push_back(build_cmd->add_option(
      "--tokens", b.scale.tokens_path, "gpt-words: a word-level token file (bench/python/word_tokens.py IN.txt OUT.bin)"));
  recording.push_back(build_cmd->add_option("--vocab", b.scale.tokens_vocab, "gpt-words: the token file's vocabulary (default 8192)"));
  recording.push_back(build_cmd->add_option(
      "--gpt-size", b.scale.gpt_size, "small (1-3 x 32-64, context 32/64; default) or medium (2-5 x 96-160, context 128)"));
  recording.push_back(build_cmd->add_option("--states", b.scale.states, "recorded states per run"));
  recording.push_back(build_cmd->add_option("--max-scalars", b.scale.max_scalars, "recorded scalars per tensor"));
  recording.push_back(build_cmd->add_option("--interval-scale", b.scale.interval_scale, "multiplies the recording intervals"));
  recording.push_back(build_cmd->add_option("--corpus-seed", b.scale.seed, "seed of the drawn runs"));
  recording.push_back(build_cmd->add_option(
      "--optimizer", b.scale.optimizer, "adamw (default) or muon: the corpus runs' optimizer (muon: --families gpt only)"));
  build_cmd->add_option("--steps", b.train.steps, "meta-training steps");
  build_cmd->add_option("--windows", b.train.windows, "windows per meta batch");
  build_cmd->add_option("--scalars", b.train.scalars, "scalars per window");
  build_cmd->add_option("--hidden", b.train.hidden, "WNN+ width (the released model: 128)");
  build_cmd->add_option("--lr", b.train.lr, "AdamW rate (cosine to 1e-6)");
  build_cmd->add_option("--holdout-every", b.holdout_every, "hold every n-th run out of training (0: none)");
  build_cmd->add_option("--out", b.out, "the weights file");
  recording.push_back(build_cmd->add_option("--corpus-out", b.corpus_out, "also write the corpus here (safetensors)"));
  recording.push_back(build_cmd->add_option("--fashion-mnist-dir", b.fashion_mnist_dir));
  auto* corpus_in = build_cmd->add_option("--corpus-in", b.corpus_in,
                                          "train on these corpora (repeat or comma list) instead of recording one; "
                                          "the recording options (--runs ... --optimizer, --corpus-out) do not apply")
                        ->delimiter(',');
  for (CLI::Option* o : recording) corpus_in->excludes(o);
  build_cmd->add_option("--work-dir", b.work_dir, "scratch folder (the license text)");
  TuneArgs tu;
  tu.scale = medium_gpt_runs(8, 2030);
  auto* tune_cmd = app.add_subcommand("tune", "loss-aware tuning of a nowcaster on fresh runs (the loss at its predictions)");
  tune_cmd->add_flag("--quick", "a few-second preset (one short run tuned, one scored) for tests");
  tune_cmd->add_option("--from", tu.from, "the weights to start from (default: own-gpt's)");
  tune_cmd->add_option("--out", tu.out, "the tuned weights file");
  tune_cmd->add_option("--runs", tu.scale.runs, "runs tuned on (default 8)");
  tune_cmd->add_option("--held", tu.held, "further runs only scored (default 2)");
  add_drawn_run_options(tune_cmd, tu.scale, "2030, not build's");
  tune_cmd->add_option("--probes", tu.probes, "validation batches the loss is probed on (default 4)");
  tune_cmd->add_option("--steps-per-run", tu.tune.steps_per_run, "meta steps on each run");
  tune_cmd->add_option("--lr", tu.tune.lr, "AdamW rate of the tuning (constant)");
  tune_cmd->add_option("--loss-weight", tu.tune.loss_weight, "weight of loss(prediction) / loss(now)");
  tune_cmd->add_option("--l1-weight", tu.tune.l1_weight, "weight of the L1 to the recorded future");
  tune_cmd->add_option("--grad-scalars", tu.tune.grad_scalars, "scalars per tensor the nowcaster's gradient uses");
  tune_cmd->add_option("--recover-steps", tu.tune.recover_steps,
                       "optimizer steps from the prediction before the loss is read (default 0: at the prediction)");
  tune_cmd->add_option("--seed", tu.tune.seed, "seed of the (t, k) draws and scalar subsets");
  tune_cmd->add_option("--work-dir", tu.work_dir, "scratch folder (the license text)");
  tune_cmd->add_option("--fashion-mnist-dir", tu.fashion_mnist_dir);
  ScanArgs sc;
  sc.scale = medium_gpt_runs(3, 2040);
  auto* scan_cmd = app.add_subcommand("scan", "what jumps are worth after N optimizer steps, against no jump on the same batches");
  scan_cmd->add_flag("--quick", "a few-second preset (one short run, one nowcaster) for tests");
  scan_cmd->add_option("--models", sc.models, "registered nowcasters (wnn, nino, own, own-gpt, own-gpt-loss, own-words, wnn-tuned), each optionally "
                       "name=weights.safetensors; comma list (default: wnn, own-gpt, own-gpt-loss)")
      ->delimiter(',');
  scan_cmd->add_option("--runs", sc.scale.runs, "fresh runs (default 3)");
  add_drawn_run_options(scan_cmd, sc.scale, "2040: neither build's nor tune's");
  scan_cmd->add_option("--task", sc.task,
                       "measure a benchmark task instead of drawn runs: fm16, gpt-tiny-kjv, gpt-wide-kjv (6 x 256) or "
                       "gpt-words-kjv (3 x 64 on --tokens, record_v2's word-level GPT); NiNo's protocol, a state every "
                       "200 steps x --interval-scale, seeds --first-seed .. --first-seed + --runs - 1");
  scan_cmd->add_option("--lr", sc.task_lr, "with --task: its constant rate instead of the task's (fm16 6e-3, the byte-level GPTs 3e-3, the word-level 2e-3)");
  scan_cmd->add_option("--first-seed", sc.first_seed, "with --task: the first run's seed (default 1)");
  scan_cmd->add_option("--at", sc.at, "recorded states jumped from, comma list (default: 4 and the middle of 4 .. last)")
      ->delimiter(',');
  scan_cmd->add_option("--horizons", sc.grid.horizons, "comma list of k (default 5,20,40)")->delimiter(',');
  scan_cmd->add_option("--scales", sc.grid.scales, "comma list of jump scales (default 0.5,1,2)")->delimiter(',');
  scan_cmd->add_option("--parts", sc.parts,
                       "comma list of the parameter kinds a jump moves: all, or kinds joined by + "
                       "(linear, conv, bias, norm, wte, wpe, attn; default all)")
      ->delimiter(',');
  scan_cmd->add_option("--recover-steps", sc.grid.recover_steps, "N: optimizer steps after the jump (default 100)");
  scan_cmd->add_option("--oracle-steps", sc.grid.oracle_steps,
                       "comma list of D: also jump to where plain training gets in D steps on other batches "
                       "(one future, and the mean of --oracle-futures): the ceiling a nowcaster is measured against")
      ->delimiter(',');
  scan_cmd->add_option("--oracle-futures", sc.grid.oracle_futures, "futures averaged for the oracle's mean (default 3)");
  scan_cmd->add_option("--oracle-blends", sc.grid.oracle_blends,
                       "comma list of b in (0, 1]: also jump to (1 - b) x each prediction + b x the oracle's mean")
      ->delimiter(',');
  scan_cmd->add_flag("--trend", sc.grid.trend, "with --oracle-steps: also the last 4 intervals' change carried on D steps");
  scan_cmd->add_option("--lookahead", sc.grid.lookahead,
                       "with --oracle-steps: comma list of S; also the mean future at S steps carried on to each D > S")
      ->delimiter(',');
  scan_cmd->add_option("--averages", sc.grid.averages,
                       "comma list of half-lives h (steps): also a jump to the run's moving average of the weights")
      ->delimiter(',');
  scan_cmd->add_option("--dump-dir", sc.dump_dir,
                       "with --oracle-steps: write each state's context and futures here (runR-seedS_stateT.safetensors)");
  scan_cmd->add_option("--probes", sc.probes, "validation batches the loss is read on (default 16, or all the split holds)");
  scan_cmd->add_option("--work-dir", sc.work_dir, "scratch folder (the license text)");
  scan_cmd->add_option("--fashion-mnist-dir", sc.fashion_mnist_dir);
  EvalArgs e;
  auto* eval_cmd = app.add_subcommand("eval", "score own vs released WNN+ vs no jump on FM-16 and the tiny GPT");
  eval_cmd->add_option("--own", e.own);
  eval_cmd->add_option("--wnn", e.wnn);
  eval_cmd->add_option("--tasks", e.tasks, "comma list of fm16, gpt-tiny-kjv");
  eval_cmd->add_option("--fm16-interval", e.fm16_interval);
  eval_cmd->add_option("--fm16-states", e.fm16_states);
  eval_cmd->add_option("--gpt-interval", e.gpt_interval);
  eval_cmd->add_option("--gpt-states", e.gpt_states);
  eval_cmd->add_option("--log", e.log, "also write the tables here");
  eval_cmd->add_option("--fashion-mnist-dir", e.fashion_mnist_dir);
  // The preset is applied before parsing, so that options given beside --quick override it.
  if (std::find(argv + 1, argv + argc, std::string("--quick")) != argv + argc) {
    quick_build(b);
    quick_tune(tu);
    quick_scan(sc);
  }
  CLI11_PARSE(app, argc, argv);
  ht::set_threads(threads);
  try {
    if (*build_cmd) return build(b, command_line);
    if (*tune_cmd) return tune(tu, command_line);
    if (*scan_cmd) return scan(sc);
    return eval(e, threads);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "nowcast-meta: %s\n", ex.what());
    return 1;
  }
}
