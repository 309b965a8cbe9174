// The jump scan's measurement: from a recorded state, the loss N optimizer steps after each jump
// against N and 2N steps without one, every run on the same batches (common random numbers).
#include "scan.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <torch/torch.h>

#include "hybrid/core/safetensors.h"
#include "hybrid/hybrid/nowcaster_registry.h"

namespace ht::meta {
namespace {

double mean_probe_loss(const LossTuneRun& run) {
  at::NoGradGuard no_grad;
  double sum = 0;
  for (int64_t p = 0; p < run.probes; ++p) sum += run.probe_loss(p).item<double>();
  return sum / static_cast<double>(run.probes);
}

// Loss after `steps` optimizer steps from whatever run.params hold now (the run's optimizer as at t).
double after_steps(const LossTuneRun& run, int64_t t, int64_t steps) {
  at::AutoGradMode grad(true);
  run.recover(t, steps);
  return mean_probe_loss(run);
}

// The oracle's jump targets at state t: per captured step S (each D and each lookahead), one future
// and the mean of `futures` futures, each reached by plain training from t on batches neither the
// run nor recover reads.
struct OracleTargets {
  std::map<int64_t, std::vector<at::Tensor>> one, mean;  // by S: one tensor per parameter
};

OracleTargets oracle_targets(const LossTuneRun& run, int64_t t, const std::vector<int64_t>& steps, int64_t futures) {
  if (!run.explore) throw NowcastError("jump scan: the run cannot train on other batches (no oracle)");
  at::AutoGradMode grad(true);
  OracleTargets o;
  const int64_t last = *std::max_element(steps.begin(), steps.end());
  for (int64_t d = 1; d <= futures; ++d) {
    run.explore(t, d, last, [&](int64_t s) {
      if (std::find(steps.begin(), steps.end(), s) == steps.end()) return;
      at::NoGradGuard no_grad;
      auto& mean = o.mean[s];
      for (size_t i = 0; i < run.params.size(); ++i) {
        const at::Tensor w = run.params[i].detach().to(at::kFloat);
        if (d == 1) o.one[s].push_back(w.clone()), mean.push_back(w / static_cast<double>(futures));
        else mean[i].add_(w, 1.0 / static_cast<double>(futures));
      }
    });
  }
  return o;
}

// Two changes over all parameters, a_end - a_start and b_end - b_start: the cosine between them and
// the ratio of their norms.
struct ChangePair {
  double cosine = 0, norm_ratio = 0;
};
ChangePair compare_changes(const std::vector<at::Tensor>& a_end, const std::vector<at::Tensor>& a_start,
                           const std::vector<at::Tensor>& b_end, const std::vector<at::Tensor>& b_start) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a_end.size(); ++i) {
    const at::Tensor da = (a_end[i] - a_start[i]).to(at::kDouble), db = (b_end[i] - b_start[i]).to(at::kDouble);
    ab += (da * db).sum().item<double>(), aa += (da * da).sum().item<double>(), bb += (db * db).sum().item<double>();
  }
  return {ab / std::sqrt(aa * bb + 1e-300), std::sqrt(aa / (bb + 1e-300))};
}

// How a predicted change from state t lines up with another (the expected future's).
std::string alignment(const LossTuneRun& run, int64_t t, const std::vector<at::Tensor>& a,
                      const std::vector<at::Tensor>& b) {
  const ChangePair c = compare_changes(a, run.states.at(t), b, run.states.at(t));
  return fmt::format("cosine {:+.3f}, norm ratio {:.3f}", c.cosine, c.norm_ratio);
}

}  // namespace

std::string scan_state(const std::vector<ScanModel>& models, const ScanGrid& grid, const LossTuneRun& run, int64_t t,
                       std::vector<ScanCell>& cells, const std::string& dump_path) {
  if (!run.recover) throw NowcastError("jump scan: the run cannot train on from a state");
  const int64_t N = grid.recover_steps;
  write_state(run, t);
  const double now = mean_probe_loss(run);
  const double plain = after_steps(run, t, N);
  write_state(run, t);
  const double plain2 = after_steps(run, t, 2 * N);
  std::string report = fmt::format("loss at the state {:.4f}; without a jump after {} steps {:.4f}, after {} {:.4f}", now,
                                   N, plain, 2 * N, plain2);
  if (t + 1 < static_cast<int64_t>(run.states.size())) {
    // The instrument's own check: from state t the optimizer must retrace the run to state t + 1
    // (its moments, step count, rate and batches restored), or every row below measures a restart.
    write_state(run, t);
    at::AutoGradMode grad(true);
    run.recover(t, run.interval);
    double worst = 0;
    for (size_t i = 0; i < run.params.size(); ++i)
      worst = std::max(worst, (run.params[i].detach().to(at::kFloat) - run.states[t + 1][i]).abs().max().item<double>());
    report += fmt::format("; retraced to the next state within {:.1e}", worst);
  }
  std::vector<int64_t> captured = grid.oracle_steps;
  captured.insert(captured.end(), grid.lookahead.begin(), grid.lookahead.end());
  const OracleTargets targets =
      grid.oracle_steps.empty() ? OracleTargets{} : oracle_targets(run, t, captured, grid.oracle_futures);
  if (!dump_path.empty() && !grid.oracle_steps.empty()) {
    NamedTensors dump;
    for (int64_t j = 0; j < kNowcastContext && j <= t; ++j)
      for (size_t i = 0; i < run.params.size(); ++i)
        dump.emplace_back(fmt::format("state-{}/{}", j, run.spec.params[i].name), run.states[t - j][i]);
    for (const auto& [s, mean] : targets.mean)
      for (size_t i = 0; i < mean.size(); ++i) dump.emplace_back(fmt::format("mean-{}/{}", s, run.spec.params[i].name), mean[i]);
    for (const int64_t d : grid.oracle_steps)
      for (size_t i = 0; i < run.params.size(); ++i)
        dump.emplace_back(fmt::format("one-{}/{}", d, run.spec.params[i].name), targets.one.at(d)[i]);
    for (const auto& [h, averages] : run.averages)
      for (size_t i = 0; i < run.params.size(); ++i)
        dump.emplace_back(fmt::format("average-{}/{}", h, run.spec.params[i].name), averages.at(t)[i]);
    // What training computes at the state, for gradient-aware models (subspace_fit.py --gradients):
    // the loss gradient on each probe batch at state t's weights. Taken before any jump is scored,
    // so the weights are the state's.
    write_state(run, t);
    for (int64_t p = 0; p < run.probes; ++p) {
      at::AutoGradMode grad(true);
      const std::vector<at::Tensor> g = torch::autograd::grad({run.probe_loss(p)}, run.params);
      for (size_t i = 0; i < g.size(); ++i)
        dump.emplace_back(fmt::format("grad-{}/{}", p, run.spec.params[i].name), g[i].detach().to(at::kFloat));
    }
    save_safetensors(dump_path, dump, {{"interval", std::to_string(run.interval)}, {"state", std::to_string(t)},
                                       {"futures", std::to_string(grid.oracle_futures)}});
  }
  // One jump (target, scale, kinds moved) scored against no jump on the same batches, into its cell
  // (made on first use: cells come out in the order this function first scores them).
  const auto score = [&](const std::string& name, int64_t k, const std::vector<at::Tensor>& target) {
    for (const auto& part : grid.parts)
      for (const double scale : grid.scales) {
        auto cell = std::find_if(cells.begin(), cells.end(), [&](const ScanCell& x) {
          return x.model == name && x.k == k && x.scale == scale && x.part == part.text();
        });
        if (cell == cells.end()) cell = cells.insert(cells.end(), ScanCell{name, k, scale, part.text()});
        write_jump(run, t, target, scale, part);
        const double at_jump = mean_probe_loss(run);
        const double jumped = after_steps(run, t, N);
        cell->at_jump += at_jump / now;
        cell->after += jumped / plain;
        cell->gained += plain - jumped;
        cell->progress += plain - plain2;
        ++cell->rows;
      }
  };
  const auto against_mean = [&](const std::string& what, int64_t d, const std::vector<at::Tensor>& target) {
    report += fmt::format("\n    {} against the mean future at {} steps: {}", what, d,
                          alignment(run, t, target, targets.mean.at(d)));
  };
  for (const auto& m : models) {
    // Built on this run's parameters (NiNo: its neural graph and features, once per state).
    const auto nowcaster = find_nowcaster(m.name).load(m.weights, run.spec, NowcastOptions{});
    for (const int64_t k : grid.horizons) {
      const std::vector<at::Tensor> predicted = predict_from_state(run, *nowcaster, t, k);  // every part and scale
      score(m.name, k, predicted);
      for (const int64_t d : grid.oracle_steps) {
        against_mean(fmt::format("{} k = {}", m.name, k), d, predicted);
        // Part way from the prediction to the expected future: how good a nowcaster has to be.
        for (const double blend : grid.oracle_blends) {
          std::vector<at::Tensor> mixed;
          for (size_t i = 0; i < predicted.size(); ++i) mixed.push_back(predicted[i] * (1 - blend) + targets.mean.at(d)[i] * blend);
          const std::string name = fmt::format("{}~{:g}mean{}", m.name, blend, d);
          score(name, k, mixed);
          against_mean(name + fmt::format(" k = {}", k), d, mixed);
        }
      }
    }
  }
  for (const int64_t h : grid.averages) {
    const auto& average = run.averages.at(h).at(t);
    score(fmt::format("average-{}", h), h, average);
    for (const int64_t d : grid.oracle_steps)
      against_mean(fmt::format("the moving average of half-life {} steps", h), d, average);
  }
  for (const int64_t d : grid.oracle_steps) {
    score("future", d, targets.one.at(d));
    score(fmt::format("futures-mean{}", grid.oracle_futures), d, targets.mean.at(d));
    against_mean("one future", d, targets.one.at(d));
    // The run's own continuation, on its own batches: were the futures on other batches unlike it
    // (their stream, not the state, setting their direction), this would line up with them worse.
    if (t + 1 < static_cast<int64_t>(run.states.size()))
      against_mean(fmt::format("the run's own next {} steps", run.interval), d, run.states[t + 1]);
    if (grid.trend && t >= kNowcastContext - 1) {
      // The last context's change carried on for D steps: the plainest extrapolation there is.
      const int64_t back = kNowcastContext - 1, past = back * run.interval;
      std::vector<at::Tensor> trend;
      for (size_t i = 0; i < run.params.size(); ++i)
        trend.push_back(run.states[t][i] + (run.states[t][i] - run.states[t - back][i]) * (static_cast<double>(d) / past));
      score("trend", d, trend);
      against_mean(fmt::format("the last {} steps' change carried on", past), d, trend);
    }
    for (const int64_t s : grid.lookahead) {
      if (s >= d) continue;
      std::vector<at::Tensor> carried;
      for (size_t i = 0; i < run.params.size(); ++i)
        carried.push_back(run.states[t][i] + (targets.mean.at(s)[i] - run.states[t][i]) * (static_cast<double>(d) / s));
      const std::string name = fmt::format("lookahead-{}", s);
      score(name, d, carried);
      against_mean(fmt::format("the mean future at {} steps carried on", s), d, carried);
      // The look is the first S steps of the D it is lined up with: what it says of the other
      // D - S is the cosine of its change with theirs.
      const ChangePair overlap_free =
          compare_changes(targets.mean.at(s), run.states[t], targets.mean.at(d), targets.mean.at(s));
      report += fmt::format("; its first {} steps against the other {}: cosine {:+.3f}", s, d - s, overlap_free.cosine);
    }
  }
  write_state(run, static_cast<int64_t>(run.states.size()) - 1);
  return report;
}

}  // namespace ht::meta
