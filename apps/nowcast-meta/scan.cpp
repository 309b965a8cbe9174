// The jump scan's measurement: from a recorded state, the loss N optimizer steps after each jump
// against N and 2N steps without one, every run on the same batches (common random numbers).
#include "scan.h"

#include <map>

#include <fmt/format.h>
#include <torch/torch.h>

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

}  // namespace

std::string scan_state(const std::vector<ScanModel>& models, const ScanGrid& grid, const LossTuneRun& run, int64_t t,
                       std::vector<ScanCell>& cells) {
  if (!run.recover) throw NowcastError("jump scan: the run cannot train on from a state");
  const int64_t N = grid.recover_steps;
  write_state(run, t);
  const double now = mean_probe_loss(run);
  const double plain = after_steps(run, t, N);
  write_state(run, t);
  const double plain2 = after_steps(run, t, 2 * N);
  if (cells.empty())
    for (const auto& m : models)
      for (const auto& part : grid.parts)
        for (const int64_t k : grid.horizons)
          for (const double scale : grid.scales) cells.push_back(ScanCell{m.name, k, scale, part.text()});
  size_t c = 0;
  for (const auto& m : models) {
    // Built on this run's parameters (NiNo: its neural graph and features, once per state).
    const auto nowcaster = find_nowcaster(m.name).load(m.weights, run.spec, NowcastOptions{});
    std::map<int64_t, std::vector<at::Tensor>> predicted;  // by k: one prediction for every part and scale
    for (const int64_t k : grid.horizons) predicted[k] = predict_from_state(run, *nowcaster, t, k);
    for (const auto& part : grid.parts)
      for (const int64_t k : grid.horizons)
        for (const double scale : grid.scales) {
          ScanCell& cell = cells.at(c++);
          write_jump(run, t, predicted.at(k), scale, part);
          const double at_jump = mean_probe_loss(run);
          const double jumped = after_steps(run, t, N);
          cell.at_jump += at_jump / now;
          cell.after += jumped / plain;
          cell.gained += plain - jumped;
          cell.progress += plain - plain2;
          ++cell.rows;
        }
  }
  write_state(run, static_cast<int64_t>(run.states.size()) - 1);
  return fmt::format("loss at the state {:.4f}; without a jump after {} steps {:.4f}, after {} {:.4f}", now, N, plain,
                     2 * N, plain2);
}

}  // namespace ht::meta
