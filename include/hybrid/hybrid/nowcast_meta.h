// Meta-training a WNN+-shaped nowcaster of our own (issue 21, item 2c): trajectories recorded from
// training runs, and the WNN+ network trained on them with autograd, written as load_wnn_plus reads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/hybrid/nowcast.h"

namespace ht {

// One parameter tensor's trajectory: a fixed random subset of its scalars at every recorded state,
// and the sum and sum of squares of the whole tensor per state (so a window's mean / std are the
// whole tensor's, as tensor_scale computes them for a jump).
struct TrajectoryTensor {
  std::string name;
  int64_t numel = 0;
  at::Tensor kinds;   // [M] int64: ParamKind (1-9) of each sampled scalar (q|k|v thirds: 7/8/9)
  at::Tensor values;  // [T, M] float32: the sampled scalars at each of T states
  std::vector<double> sum, sumsq;  // [T]: over all numel values of the tensor
};

struct Trajectory {
  std::string task;  // e.g. "mlp 784-128-10 lr 0.002 cosine seed 3"
  int64_t interval = 0;  // training steps between two recorded states
  std::vector<TrajectoryTensor> tensors;
  int64_t states() const { return tensors.empty() ? 0 : tensors.front().values.size(0); }
};

// Records the parameters of a model described by `spec` (kinds as the nowcasters see them),
// keeping at most max_scalars scalars per tensor (a seeded random subset).
class TrajectoryRecorder {
 public:
  TrajectoryRecorder(const NowcastSpec& spec, int64_t max_scalars, uint64_t seed);
  // One state: float32 CPU tensors in spec order and shapes (copied, not kept).
  void record(const std::vector<at::Tensor>& params);
  int64_t states() const { return states_; }
  Trajectory take(const std::string& task, int64_t interval);  // the recording; the recorder empties

 private:
  NowcastSpec spec_;
  std::vector<int64_t> numel_;
  std::vector<at::Tensor> index_, kinds_;
  std::vector<std::vector<at::Tensor>> values_;
  std::vector<std::vector<double>> sum_, sumsq_;
  int64_t states_ = 0;
};

// A corpus file (safetensors: per trajectory and tensor its values, kinds and sums; the task
// names and intervals in the metadata). Throws NowcastError on a file that is not one.
void save_trajectories(const std::string& path, const std::vector<Trajectory>& corpus);
std::vector<Trajectory> load_trajectories(const std::string& path);

struct MetaTrainOptions {
  int64_t hidden = 128;     // the released WNN+ width
  int64_t horizons = 40;    // output rows: k = 1..horizons recording intervals ahead
  int64_t steps = 6000;
  int64_t windows = 128;    // per batch: (trajectory, tensor, time) windows, each tensor equally likely
  int64_t scalars = 32;     // scalars per window (so large tensors do not dominate)
  double lr = 3e-3;         // AdamW, cosine to min_lr (NiNo's train_nino.py settings)
  double min_lr = 1e-6;
  double weight_decay = 1e-2;
  double grad_clip = 5.0;
  double target_clip = 100.0;  // |normalised target - last normalised state| is clipped here
  uint64_t seed = 0;
};

// Progress per step: step (1-based), the batch's mean L1 loss, the learning rate.
using MetaProgress = std::function<void(int64_t step, double loss, double lr)>;

struct MetaTrainResult {
  std::vector<double> losses;  // per step, the batch's masked mean L1 loss (normalised units)
  // The trained weights under load_wnn_plus's names (layer_embed.weight, edge_proj.fc.0.*,
  // edge_mlp.fc.{0,2,4,6}.*), float32.
  std::map<std::string, at::Tensor> weights;
};

// The samples: 5 consecutive states t-4..t of a tensor's scalars, normalised by the tensor's mean
// and std over those 5 states (tensor_scale's), and the normalised states t+1..t+horizons
// (masked past the recording). The model is exactly WNN+'s: prediction for k = last normalised
// state + out[k]. Loss: L1 over every valid horizon (NiNo's). Needs trajectories of >= 6 states.
MetaTrainResult meta_train_wnn_plus(const std::vector<Trajectory>& corpus, const MetaTrainOptions& options,
                                    const MetaProgress& progress = nullptr);

// The mean L1 loss of given weights on `batches` batches drawn as training draws them (seeded):
// for held-out trajectories.
double meta_eval_loss(const std::map<std::string, at::Tensor>& weights, const std::vector<Trajectory>& corpus,
                      const MetaTrainOptions& options, int64_t batches, uint64_t seed);

// Loss-aware tuning. L1 on normalised weights rewards predictions that raise the task's loss (a
// GPT nowcaster closer in weight space was worse in loss, BENCHMARKS 9), so this trains the
// nowcaster through the loss at its predicted weights: the full prediction for every scalar,
// the model's loss and gradient there (dL/dw), and dL/dw chained into the nowcaster on a random
// subset of scalars (rescaled, so the estimate of the full gradient is unbiased).
struct LossTuneRun {
  NowcastSpec spec;                // kinds of the parameters, in `params` order
  std::vector<at::Tensor> params;  // the model's live parameters: set to a prediction, then probed
  std::vector<std::vector<at::Tensor>> states;  // [T][P] full float32 states, one every interval
  int64_t interval = 0;  // optimizer steps between two states (state t: after (t + 1) x interval)
  // By half-life h (in optimizer steps): [T][P] the exponential moving average of the weights over
  // every step of the run, at each recorded state (decay 0.5^(1/h) a step, from the initial weights).
  std::map<int64_t, std::vector<std::vector<at::Tensor>>> averages;
  // The model's loss on probe batch `probe` (0 .. probes-1) at its current parameters, with grad.
  std::function<at::Tensor(int64_t probe)> probe_loss;
  int64_t probes = 1;
  // Puts the run's optimizer back in its state at state t and trains `steps` steps from the
  // current parameters, as the optimizer continues after a jump (null: the run cannot). Each call
  // from the same t trains on the same batches (the run's own after state t), so a jump and no
  // jump are compared on common random numbers.
  std::function<void(int64_t t, int64_t steps)> recover;
  // As recover, from state t's own weights and optimizer state, on other batches: draw d >= 1 reads
  // the run's data stream from an epoch far past the run's own (each draw another one), so the
  // draws are independent futures of the same state. Calls after(s) after each step s = 1 .. steps
  // (the caller reads run.params there). Null: the run cannot.
  std::function<void(int64_t t, int64_t draw, int64_t steps, const std::function<void(int64_t)>& after)> explore;
};

struct LossTuneOptions {
  int64_t steps_per_run = 50;  // meta steps on each run: (t, k) drawn with t >= 4, k <= horizons
  double lr = 3e-4;            // AdamW on the nowcaster (fine-tuning), constant
  double weight_decay = 1e-2;
  double loss_weight = 1.0;    // of (probe loss at the prediction) / (probe loss at state t)
  double l1_weight = 1.0;      // of the L1 to the recorded future (only where t + k was recorded)
  int64_t grad_scalars = 8192; // per tensor: scalars the nowcaster's gradient is computed on
  double grad_clip = 1.0;
  // Optimizer steps taken from the predicted weights before the loss is probed. A far jump is
  // worth what is left of it once the optimizer has corrected its overshoot (measured on FM-16:
  // WNN+'s kept jumps raise the loss at once and beat plain 250 steps later), so the loss is
  // read there; its gradient is chained into the nowcaster as if taken at the prediction
  // (first-order, as first-order MAML). 0: the loss at the prediction itself.
  int64_t recover_steps = 0;
  uint64_t seed = 0;
};

struct LossTuneStep {
  int64_t t = 0, k = 0;
  // Probe loss at state t and at the prediction, before the update (with recover_steps: in
  // score() both after that many steps, from state t and from the prediction; in tune() the
  // latter only).
  double loss_now = 0, loss_pred = 0;
  double l1 = NAN;                     // normalised L1 to state t + k (NAN: not recorded)
};

class LossTuner {
 public:
  // Starts from `start` (load_wnn_plus's names, e.g. a meta-trained own model's weights).
  LossTuner(const std::map<std::string, at::Tensor>& start, LossTuneOptions options);
  ~LossTuner();
  // steps_per_run meta steps on one run. Leaves run.params at the run's last state.
  std::vector<LossTuneStep> tune(const LossTuneRun& run, const std::function<void(const LossTuneStep&)>& progress = nullptr);
  // Probe loss ratio (prediction / state t) of the current weights at (t, k), no update.
  LossTuneStep score(const LossTuneRun& run, int64_t t, int64_t k, int64_t probe) const;
  std::map<std::string, at::Tensor> weights() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes recorded state t into run.params.
void write_state(const LossTuneRun& run, int64_t t);

// A nowcaster's prediction from recorded state t (its context: states t-4 .. t) at horizon k, one
// tensor per parameter. `model` is built on run.spec (any registered nowcaster: WNN+, NiNo, ours).
std::vector<at::Tensor> predict_from_state(const LossTuneRun& run, NowcastModel& model, int64_t t, int64_t k);

// Writes the jump from state t to `predicted` into run.params: state t plus `scale` times the
// predicted change (0: no jump, bit for bit), for the parameter kinds in `kinds` (the others:
// state t). One prediction serves every scale and kind set.
void write_jump(const LossTuneRun& run, int64_t t, const std::vector<at::Tensor>& predicted, double scale = 1.0,
                const JumpKinds& kinds = {});

// Reads a WNN+ weights file (safetensors) into load_wnn_plus's names.
std::map<std::string, at::Tensor> read_wnn_plus(const std::string& path);

// Writes the weights as safetensors (with `metadata`) for load_wnn_plus.
void save_wnn_plus(const std::string& path, const std::map<std::string, at::Tensor>& weights,
                   const std::map<std::string, std::string>& metadata = {});

}  // namespace ht
