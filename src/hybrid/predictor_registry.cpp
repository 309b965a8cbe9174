// The list of update predictors: each is defined in its own file and registered here, once. The
// engine's factory, the CLI's keys, `config --keys` and the memory planner all read this list.
#include "hybrid/hybrid/predictor_registry.h"

#include "hybrid/core/allocator.h"
#include "hybrid/core/errors.h"
#include "hybrid/hybrid/options.h"

namespace ht {

// Adding a predictor: its file defines <name>_predictor_spec(); one line here declares and lists it.
PredictorSpec mean_predictor_spec();        // trajectory_predictor.cpp
PredictorSpec regression_predictor_spec();  // trajectory_predictor.cpp
PredictorSpec drift_predictor_spec();       // trajectory_predictor.cpp
PredictorSpec last_predictor_spec();        // extrapolation_predictor.cpp
PredictorSpec ema_predictor_spec();         // extrapolation_predictor.cpp
PredictorSpec dmd_predictor_spec();         // dmd_predictor.cpp
PredictorSpec rssm_predictor_spec();        // rssm_predictor.cpp

const std::vector<PredictorSpec>& predictor_registry() {
  static const std::vector<PredictorSpec> all = {
      mean_predictor_spec(), regression_predictor_spec(), drift_predictor_spec(), last_predictor_spec(),
      ema_predictor_spec(),  dmd_predictor_spec(),        rssm_predictor_spec(),
  };
  return all;
}

const PredictorSpec& find_predictor(const std::string& name) {
  std::string names;
  for (const auto& spec : predictor_registry()) {
    if (spec.name == name) return spec;
    names += (names.empty() ? "\"" : ", \"") + spec.name + "\"";
  }
  throw OptionsError("HybridOptions.predictor = \"" + name + "\": must be one of " + names);
}

const PredictorOption* find_predictor_option(const std::string& key) {
  for (const auto& spec : predictor_registry())
    for (const auto& option : spec.options)
      if (option.key == key) return &option;
  return nullptr;
}

int64_t parameter_copies_bytes(const std::vector<int64_t>& numels, int64_t copies) {
  int64_t bytes = 0;
  for (int64_t n : numels) bytes += allocator_block_bytes(n * 4);
  return copies * bytes;
}

int64_t hybrid_state_bytes(const std::vector<int64_t>& numels, const HybridOptions& options) {
  const PredictorSpec& spec = find_predictor(options.predictor);
  // hybrid_strategy.cpp: the rollback snapshot; predictors that watch updates also need the
  // before_, delta_ and predicted_ buffers (trajectory predictors add their prediction in place
  // and are measured on samples of a few KiB).
  const int64_t engine = spec.input == UpdatePredictor::Input::Weights ? 1 : 4;
  return parameter_copies_bytes(numels, engine) + (spec.state_bytes ? spec.state_bytes(numels, options) : 0);
}

}  // namespace ht
