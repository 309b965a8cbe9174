// Learned weight nowcasting as a step strategy (run.mode=nowcast): record 5 states of the weights
// per period, jump them ahead with a pretrained nowcaster (WNN+, NiNo), verify on a probe, undo.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/schedule.h"
#include "hybrid/core/trainer.h"
#include "hybrid/hybrid/nowcast.h"

namespace ht {

struct NowcastStrategyOptions {
  // The nowcaster, by its registry name (nowcaster_registry.h: wnn, nino, own), and its weights file.
  std::string model = "wnn";
  std::string weights;  // path to the safetensors file; the CLI fills in models/<its weights_file>
  // How the model's parameters form a neural graph (BuiltModel::architecture): "feedforward"
  // (MLP, CNN) or "gpt2" (Hugging Face names), with the GPT's attention heads.
  std::string architecture = "feedforward";
  int64_t n_head = 0;

  // NiNo's schedule: a state of the weights every period / 5 steps (host memory), and at the
  // 5th, instead of that step's update, one jump k recording intervals ahead. Steps are the
  // trainer's: the jump replaces step period, 2 * period, ...
  int64_t period = 1000;  // a multiple of 5
  // k decays over the run from horizon_max to horizon_min: the j-th of n = schedule_steps /
  // period jumps takes round(lerp(max^(1/p), min^(1/p), j / (n - 1))^p), p = horizon_power
  // (NiNo's: 40 -> 1, p = 2: 40 32 26 20 15 11 7 4 2 1 over 10k steps). min = max: constant.
  int64_t horizon_max = 40;
  int64_t horizon_min = 1;
  double horizon_power = 2.0;
  int64_t schedule_steps = 0;  // the run length the schedule spans; 0: the trainer's max_steps
  // Read each k as steps ahead under the run's learning-rate schedule: a nowcaster carries on the
  // pace of its five states, which a decaying rate does not keep, so the jump is asked for the
  // intervals of that pace that cover plain's next k x period / 5 steps (the schedule's mean rate
  // over them against its mean over the states' span; at least 1). A constant rate leaves k as
  // it is; warmup + cosine roughly halves the early ones. Off: NiNo's k, whatever the schedule.
  bool horizon_by_schedule = false;
  // No jump after this step (0: no limit): the schedule's later jumps are not made. Under a
  // decaying schedule a run reaches plain's target by mid-run, so its later jumps cannot shorten
  // the time to target, only cost verdicts, and (kept unverified) end quality (BENCHMARKS.md 9).
  int64_t last_jump_step = 0;
  // The same gate as a share of the run (schedule_steps, or the trainer's max_steps), so it holds
  // for any run length: no jump after step round(last_jump_fraction x run); 0: no limit. On FM-16
  // the jumps after mid-run cost the end under both protocols - under cosine the rate has fallen
  // below half its peak, at a constant rate 10 % tolerance keeps late jumps that raise the loss -
  // and come after the target (BENCHMARKS.md 9); a gate on the rate would miss the second.
  double last_jump_fraction = 0.0;

  // Verification: the probe loss (the next probe_batches training batches, peeked, so the data
  // order stays plain mode's; or held-out ones, probe_holdout below) after the jump may exceed
  // the loss before it by tolerance x |loss| at most; otherwise the jump is undone bit-exactly,
  // the step becomes a real one and the horizon cap halves, down to 1 (it doubles back, up to
  // horizon_max, after a jump that passes). After f failures in a row (f >= 2) the next
  // 2^(f-1) - 1 jumps are skipped, so a run whose jumps all fail pays for about log2(jumps)
  // predictions. Off: every finite jump is kept.
  bool verify = true;
  int64_t probe_batches = 2;
  // Judge on the data source's probe split (DataSource::probe_batch: data held out of training
  // and of validation; its first probe_batches batches, the same each time) instead of the next
  // training batches. Training batches cannot see a jump that fits them but not unseen data: on
  // FM-16 NiNo's kept jumps took runs far enough ahead to overfit (BENCHMARKS.md 9).
  bool probe_holdout = false;
  double tolerance = 0.0;
  // Scale the tolerance by the jump's horizon, k / horizon_max: the first, far jumps get all of
  // it, the short late ones, which gain a few hundred steps at most, little. On FM-16 (8 runs) it
  // undid late jumps a flat 10 % kept without moving the time to target in 7, and cost one run
  // an earlier jump (BENCHMARKS.md 9); off by default.
  bool tolerance_by_horizon = false;
  // Delayed verification (> 0): a jump is judged only after this many real steps from the
  // predicted weights, because right after a far jump the loss spikes and Adam recovers within a
  // few hundred steps (BENCHMARKS.md, nowcasting). Then, on the next probe_batches batches (none
  // trained on this epoch; or the probe split's), the loss must be below what plain would reach:
  // the loss of the pre-jump weights carried on at their recent rate (the ratio between the last
  // two recorded states' losses, per step) over the window. Otherwise weights, optimizer state, data cursor, CPU random state and step count go
  // back to before the jump, bit-exactly, and the jump's step becomes a real one; the window's
  // steps are lost time. Must be < 4 x period / 5: a window may span up to three recordings (of
  // the jumped weights, recorded again after an undo), but not reach the two states before the
  // jump that the verdict scores. A jump with fewer steps than this left in the run is not made:
  // it could not be judged.
  int64_t verify_after = 0;
  // The share of the run's steps that undone windows and the nowcaster's predictions may cost:
  // a delayed jump is made only while what was spent, its prediction (in the run's mean step
  // times) and a window fit in it, so a run whose jumps all fail stays within about this much of
  // plain's time, plus the probes (~1 %). Where one prediction costs more than the budget
  // (WNN+ over a 535k-parameter MLP: ~190 of its 4 ms steps), no jump is made. 1 / 0: no limit
  // (as with immediate verification).
  double redo_budget = 0.03;
  // A prediction's time per predicted scalar, in ms, for the budget above. < 0: timed once, at
  // the first jump, on a 128 x 128 layer (WNN+ ~1.6e-3 on one AMD EPYC core). Setting it makes
  // the jumps made independent of timing (tests; runs to reproduce exactly).
  double prediction_ms_per_scalar = -1.0;
  // A kept jump pays into the redo budget the steps it put the run ahead of plain: how many steps
  // plain would need, at the rate the verdict extrapolates, to reach the loss the jump reached,
  // less the window (at most k x period / 5). A run that has gained can then afford another
  // window; a run whose jumps all fail earns nothing and stays within redo_budget. The rate is
  // held constant, while a loss curve flattens, so the lead is an underestimate. On FM-16 (6
  // runs) it turned the worst seed's 0.86x in steps to target into 1.25x and changed no other
  // run's; where later jumps failed, the run spent up to its lead on them (BENCHMARKS.md).
  bool redo_credit = true;
  // A failed delayed verdict whose jump still made progress - its probe loss after the window
  // below the loss of the weights it jumped from, though above plain's guess - is kept instead of
  // undone. At the verdict the window is spent either way: undoing costs it once more (back to
  // the pre-jump weights, the same steps again), keeping costs only the lag behind plain's guess
  // (the steps plain would still have been ahead at its extrapolated rate), which is less. The
  // lag is charged to the redo budget, so a run whose jumps all end behind plain stays within it;
  // the horizon cap halves as after a failure. On FM-16, 5 of 26 undone held-out verdicts were
  // such jumps, among them constant seed 3's only one (BENCHMARKS.md 9). Off: every failed
  // verdict is undone.
  bool keep_progress = false;
  // How many of the states before the jump plain's rate is fitted to (a least-squares line
  // through their probe losses, in log space where all are positive). 2: the ratio between the
  // last two, as above. More average out the noise of single states (on FM-16 the earlier of two
  // was the lower in 10 of 24 verdicts: no progress expected); at most 5 less the states the
  // window records over (verify_after / (period / 5) of them). Each costs one probe forward.
  int64_t trend_states = 2;
  // How plain's progress over the window is guessed. "trend": the trend_states states before each
  // jump, their pace carried on (above). "power": plain's probe loss falls as a power of its step,
  // L(t) ~ t^-b, b fitted once by least squares (log loss on log step) to the five states before
  // the first jump made - plain's own trajectory, no jump kept yet - and each verdict carries the
  // pre-jump loss on by it from the jump's step (the run's step: a run ahead of plain is further
  // along its flattening curve, so the guess and the lead a kept jump is credited with err on
  // plain's side). A two-state pace is noise under a constant rate: on FM-16 it guessed plain's
  // log loss would fall by 0.161 over one window where plain's smoothed curve fell by 0.084.
  std::string plain_model = "trend";
  // plain_model = power: how many states before the jump set the power's level at the jump (the
  // loss plain is carried on from). 1: the pre-jump state's loss alone. More: the curve
  // a * t^-b through their losses, log a averaged over them - on plain's FM-16 curves the guess
  // of the next evaluation erred by 6.0 % (rms, log) from step 3000 at the constant rate with one
  // state and 4.6 % with five (BENCHMARKS.md 9, `nowcast_runs.py --yardstick`). At most 5 less
  // the states the window records over. Each costs one probe forward.
  int64_t power_level_states = 1;
  // > 1: also try k x 2, k / 2, k x 4, ... (up to this many horizons in all, within [1, the
  // cap]) on the same probe and keep the lowest loss. Each costs one more
  // prediction and probe forward; the weights are predicted again when the best was not the last.
  int64_t horizon_search = 1;
  // A jump moves the weights by this multiple of the predicted change (1: to the prediction).
  // `nowcast-meta scan` measures what each scale is worth once the optimizer has corrected it.
  double jump_scale = 1.0;
  // Each moved tensor's L2 norm after a jump: its norm before plus this share of the change the
  // prediction makes to it, the predicted direction kept (1: the prediction's norm; 0: the norm
  // before the jump). NiNo's far jumps at a constant rate grow the weights' norms far past what
  // their loss progress is worth (BENCHMARKS.md 9, "What the jumps do to the weights' norms").
  double jump_norm_scale = 1.0;
  // The parameter kinds a jump moves (JumpKinds: "all", or e.g. "linear+attn"); the others stay
  // where the optimizer left them. `nowcast-meta scan --parts` measures each kind's jump.
  std::string jump_kinds = "all";

  // The optimizer's state after a kept jump: Keep (NiNo's choice), Reset (as new, so Adam's
  // bias correction starts over), or Rescale (first moment x momentum_scale, second kept).
  enum class OptimizerState { Keep, Reset, Rescale };
  OptimizerState optimizer_state = OptimizerState::Keep;
  double momentum_scale = 0.5;

  NowcastOptions model_options;  // chunk rows, eigensolve limit

  void validate() const;  // throws OptionsError("NowcastStrategyOptions.<field> ...: ...")
};

NowcastStrategyOptions::OptimizerState parse_optimizer_state(const std::string& name);  // keep|reset|rescale
const char* to_string(NowcastStrategyOptions::OptimizerState state);

// The horizon of each jump of a run: NiNo's decaying schedule, one entry per period.
std::vector<int64_t> nowcast_horizons(const NowcastStrategyOptions& options, int64_t run_steps);

// horizon_by_schedule: the horizons above (jump j at step (j + 1) x period) in intervals of the
// pace the five states before each jump were recorded at, under a learning-rate schedule. The
// schedule's total_steps must be set (the trainer sets it to the run's length).
std::vector<int64_t> schedule_horizons(const std::vector<int64_t>& horizons, const LrSchedule& schedule, int64_t period);

struct NowcastSummary {
  std::string model;
  int64_t steps = 0;
  int64_t jumps = 0;          // jumps made (predicted and applied)
  int64_t kept = 0;           // of those, passed verification
  int64_t undone = 0;         // of those, failed it: undone, the step became a real one
  int64_t steps_redone = 0;   // delayed verification: window steps thrown away by undone jumps
  int64_t too_late = 0;       // delayed verification: jumps not made, too close to the end
  int64_t over_budget = 0;    // delayed verification: jumps not made, redo_budget spent
  int64_t redo_credit = 0;    // delayed verification: steps kept jumps paid into the redo budget
  double plain_exponent = NAN; // plain_model = power: b, once fitted (NaN: not yet, or plain was not falling)
  int64_t kept_behind = 0;    // keep_progress: of the kept, those behind plain's guess (not undone: cheaper)
  int64_t steps_behind = 0;   // keep_progress: their lag behind plain's guess, charged to the redo budget
  int64_t overhead_steps = 0; // delayed verification with a budget: predictions charged to it, in mean step times
  int64_t skipped = 0;        // due while backing off after failures: not attempted
  int64_t recorded_states = 0;
  int64_t horizon_steps_kept = 0;  // sum over kept jumps of k x period / 5: steps jumped
  double setup_ms = 0.0;      // loading the nowcaster (NiNo: its graph and Laplacian features)
  double record_ms = 0.0;     // copying states
  double predict_ms = 0.0;    // the nowcaster's predictions
  double probe_ms = 0.0;      // verification forwards (two per jump) and assembling the probe
  double real_ms = 0.0;       // real steps
  int64_t state_bytes = 0;    // recorded states + the model kept between jumps
  int64_t horizon_cap = 0;    // at the end
  int64_t optimizer_snapshot_bytes = 0;  // delayed verification: the optimizer state kept over a window
  std::vector<std::string> jump_log;  // one line per jump: step, k, probe loss before / after, kept
  std::string to_string() const;
};

// Builds the nowcaster for a parameter spec; tests pass their own (a known good or bad one).
using NowcasterFactory = std::function<std::unique_ptr<NowcastModel>(const NowcastSpec& spec)>;

class NowcastStrategy : public StepStrategy {
 public:
  std::string name() const override { return "nowcast"; }
  std::string summary_text() const override { return summary().to_string(); }
  virtual const NowcastSummary& summary() const = 0;
  virtual const NowcastStrategyOptions& options() const = 0;
};

// factory: null loads options.model from the nowcaster registry with options.weights (checked to
// be readable here, so a wrong path fails before training). Throws OptionsError for options out
// of range. The nowcaster itself is built at the first step, from the trainer's model.
std::unique_ptr<NowcastStrategy> make_nowcast_strategy(const NowcastStrategyOptions& options,
                                                       NowcasterFactory factory = nullptr);

// Tensor bytes nowcast mode keeps between steps for parameters of these element counts: the 5
// recorded states and what the nowcaster keeps. And the workspace one jump adds on top (the
// nowcaster's chunks or NiNo's per-edge states), for the planner's peak.
int64_t nowcast_state_bytes(const std::vector<int64_t>& numels, const NowcastStrategyOptions& options);
int64_t nowcast_jump_bytes(const std::vector<int64_t>& numels, const NowcastStrategyOptions& options);

}  // namespace ht
