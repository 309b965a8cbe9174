// The list of models, each defined in its own file and registered here once; and the planner's
// fallback for a model without a memory model of its own: measure one step.
#include "hybrid/models/model_registry.h"

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/errors.h"
#include "hybrid/kernels/adamw8bit.h"
#include "hybrid/kernels/optimizers.h"

namespace ht {

// Adding a model: its file defines <name>_model_spec(); one line here declares and lists it.
ModelSpec gpt_model_spec();   // gpt_entry.cpp
ModelSpec mlp_model_spec();   // mlp.cpp
ModelSpec cnn_model_spec();   // cnn.cpp
ModelSpec fm16_model_spec();  // fm16.cpp

const std::vector<ModelSpec>& model_registry() {
  static const std::vector<ModelSpec> all = {gpt_model_spec(), mlp_model_spec(), cnn_model_spec(), fm16_model_spec()};
  return all;
}

const ModelSpec& find_model(const std::string& name) {
  std::string names;
  for (const auto& spec : model_registry()) {
    if (spec.name == name) return spec;
    names += (names.empty() ? "" : ", ") + spec.name;
  }
  throw OptionsError("unknown model '" + name + "'; the models are: " + names);
}

namespace {

// One plain training step (forward, backward, AdamW-family update) of a freshly built model on a
// random batch of the planned shape, with the allocator's peak read around it. Parameters and
// optimizer state are what the model allocates; the rest of the peak is activations.
MemoryEstimate measure_step(const ModelSpec& spec, const ModelSettings& settings, const DataShape& data,
                            const TrainShape& shape, const MemoryLevers& levers) {
  if (!tracking_allocator_installed())
    throw OptionsError("model '" + spec.name + "' has no memory model: measuring one step needs the tracking allocator");
  BuiltModel model = spec.build(settings, data, BuildOptions{false, spec.bf16 ? levers.precision : Precision::FP32});
  auto params = model.module->parameters();
  int64_t param_bytes = 0;
  std::vector<int64_t> numels;
  for (const auto& p : params) {
    param_bytes += allocator_block_bytes(p.numel() * 4);
    numels.push_back(p.numel());
  }
  std::unique_ptr<Optimizer> optimizer;
  AdamWOptions adamw;
  if (levers.optimizer == OptimizerKind::AdamW8bit) optimizer = make_adamw8bit(params, adamw);
  else if (levers.optimizer == OptimizerKind::AdamW) optimizer = make_adamw(params, adamw);
  else optimizer = make_sgd(params, SgdOptions{0.01, levers.optimizer == OptimizerKind::SgdMomentum ? 0.9 : 0.0, 0.0, false});
  const int64_t B = std::max<int64_t>(1, shape.batch / std::max<int64_t>(1, shape.micro_splits));
  Batch batch;
  if (spec.data == DataKind::Images) {
    batch = Batch{torch::randn({B, 1, 28, 28}), torch::randint(0, 10, {B}, torch::kLong)};
  } else {
    const int64_t T = std::max<int64_t>(1, data.context > 0 ? data.context : shape.context);
    const int64_t V = std::max<int64_t>(2, data.vocab_size);
    batch = Batch{torch::randint(0, V, {B, T}, torch::kLong), torch::randint(0, V, {B, T}, torch::kLong)};
  }
  const int64_t resident_before_step = allocator_stats().current_bytes;
  reset_peak_bytes();
  model.objective->loss(batch).backward();
  optimizer->step();
  const AllocatorStats after = allocator_stats();
  MemoryEstimate e;
  e.params = param_bytes;
  e.grads = param_bytes;
  e.optimizer_state = optimizer->state_bytes();
  e.mode_state = levers.weight_average ? param_bytes * (levers.average_lag_correction ? 2 : 1) : 0;
  if (levers.mode == TrainMode::Lookahead) e.mode_state += param_bytes * (levers.outer_momentum ? 2 : 1);
  if (levers.mode == TrainMode::Hybrid && levers.hybrid_state_bytes) e.mode_state += levers.hybrid_state_bytes(numels);
  if (levers.mode == TrainMode::Nowcast && levers.nowcast_state_bytes) e.mode_state += levers.nowcast_state_bytes(numels);
  // The peak above what lived before the step, less the gradients and state the step created.
  const int64_t step_extra = after.peak_bytes - resident_before_step;
  e.activations = std::max<int64_t>(0, step_extra - e.grads - e.optimizer_state);
  e.transient = 0;
  e.peak = e.resident() + e.activations;
  // A forward without grad (evaluation, predicted steps), measured too.
  const int64_t resident = allocator_stats().current_bytes;
  reset_peak_bytes();
  {
    torch::NoGradGuard no_grad;
    model.objective->loss(batch);
  }
  e.predict_peak = e.resident() + std::max<int64_t>(0, allocator_stats().peak_bytes - resident);
  // Nowcast: a jump's probe holds nowcast.probe_batches batches (its forward scales with them)
  // and the nowcaster's workspace comes on top of everything resident.
  if (levers.mode == TrainMode::Nowcast) {
    const int64_t forward = std::max<int64_t>(0, allocator_stats().peak_bytes - resident);
    const int64_t jump = levers.nowcast_jump_bytes ? levers.nowcast_jump_bytes(numels) : 0;
    const int64_t batch_bytes = allocator_block_bytes(static_cast<int64_t>(batch.input.nbytes())) +
                                allocator_block_bytes(static_cast<int64_t>(batch.target.nbytes()));
    e.predict_peak = e.resident() + levers.probe_batches * batch_bytes + std::max(levers.probe_batches * forward, jump);
  }
  e.peak_at = "a measured step (batch " + std::to_string(B) + ")";
  if (levers.mode == TrainMode::Nowcast && e.predict_peak > e.peak) {
    e.peak = e.predict_peak;
    e.peak_at = "a nowcast jump (batch " + std::to_string(B) + ")";
  }
  return e;
}

}  // namespace

MemoryEstimate estimate_model_memory(const ModelSpec& spec, const ModelSettings& settings, const DataShape& data,
                                     const TrainShape& shape, const MemoryLevers& levers) {
  if (spec.estimate) return spec.estimate(settings, shape, levers);
  return measure_step(spec, settings, data, shape, levers);
}

}  // namespace ht
