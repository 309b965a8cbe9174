// nowcast-meta scan: what a jump is worth once the optimizer has corrected it - each nowcaster at
// several horizons and scales, on fresh runs, against no jump on the same batches.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "hybrid/hybrid/nowcast_meta.h"

namespace ht::meta {

struct ScanModel {
  std::string name;     // a registered nowcaster: wnn, nino, own, own-gpt, ...
  std::string weights;  // its weights file
};

struct ScanGrid {
  std::vector<int64_t> horizons = {5, 20, 40};
  std::vector<double> scales = {0.5, 1.0, 2.0};
  std::vector<JumpKinds> parts = {JumpKinds{}};  // which parameter kinds each jump moves
  int64_t recover_steps = 100;  // N: the optimizer's steps after the jump before the loss is read
  // Oracle jumps, the ceiling a nowcaster is measured against: to where plain training from the
  // state gets in D steps (each D here) on other batches - one such future ("future"), and the mean
  // of `oracle_futures` of them ("futures-mean": the expected future, what a perfect nowcaster of
  // the mean would predict). Their cells' k is D, in optimizer steps.
  std::vector<int64_t> oracle_steps;
  int64_t oracle_futures = 3;
  // Per nowcaster, k and D also the jumps part way to the expected future: (1 - b) x prediction +
  // b x the mean, for each b here ("wnn~0.5mean1000"): how close a nowcaster must come to pay.
  std::vector<double> oracle_blends;
  // Per D also "trend": the state's change over the last 4 recording intervals carried on for D steps.
  bool trend = false;
  // Per D and each S < D here also "lookahead-S": the mean of the futures at S steps carried on to
  // D (state + (mean at S - state) x D / S): what a short real look from the state says of the far
  // future. The futures pass through S on their way to D: no extra training.
  std::vector<int64_t> lookahead;
  // Per half-life h here also "average-h": a jump to the moving average of the run's weights over
  // every step before the state (h in optimizer steps; the run keeps it as it trains): the noise of
  // the last steps averaged out, as weight averaging does. Its cells' k is h.
  std::vector<int64_t> averages;
};

// Sums over (run, state) of one (model, kinds moved, horizon, scale): per row, with B the probe loss after N
// steps without a jump, J after N steps from the jump, B2 after 2N steps without one.
struct ScanCell {
  std::string model;
  int64_t k = 0;
  double scale = 1.0;
  std::string part = "all";  // the kinds the jump moved (JumpKinds' text)
  double at_jump = 0;    // sum of (loss right at the jump) / (loss at state t)
  double after = 0;      // sum of J / B
  double gained = 0;     // sum of B - J
  double progress = 0;   // sum of B - B2: what N more steps of plain give
  int64_t rows = 0;
  // The jump's lead in optimizer steps, as plain's next N steps value them (linear between B and B2);
  // NAN where plain made no progress over those steps (nothing to value the lead by).
  double lead_steps(int64_t N) const { return progress > 0 ? N * gained / progress : NAN; }
};

// Scores every (model, part, k, scale) of the grid at recorded state t of `run`, adding into `cells`
// (created on first use: the nowcasters' in grid order, then the oracle's). Returns a line on the
// baseline (loss at t, B and B2), and with oracle steps one more per jump target and D: how its
// change lines up with the expected future's (cosine, norm ratio).
// dump_path (not empty, with oracle steps): also writes the state's last context of recorded
// states ("state-j/<param>": t - j, j = 0 .. 4), the mean future at every captured step
// ("mean-S/<param>"), one future per D ("one-D/<param>"), the run's moving averages at t
// ("average-h/<param>") and the loss gradient at t on each probe batch ("grad-p/<param>") as
// safetensors, for offline analysis (bench/python/future_fit.py: what a per-scalar model of the
// history can say of the future; subspace_fit.py: whole matrices). Each state also checks that the
// optimizer retraces the run from t to t + 1, and lines the run's own next interval up against
// the mean future.
std::string scan_state(const std::vector<ScanModel>& models, const ScanGrid& grid, const LossTuneRun& run, int64_t t,
                       std::vector<ScanCell>& cells, const std::string& dump_path = "");

}  // namespace ht::meta
