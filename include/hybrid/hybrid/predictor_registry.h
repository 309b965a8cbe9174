// Every update predictor in one place: its name, its own options with their ranges, its factory
// and its memory estimate. The CLI's keys, `config --keys` and the planner read it from here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/hybrid/predictor.h"

namespace ht {

struct HybridOptions;

// A setting of one predictor (e.g. drift's t-statistic). HybridOptions::predictor_options holds
// the values a run sets; the others are their defaults.
struct PredictorOption {
  std::string key;            // e.g. "drift_tstat"; the CLI's key is "hybrid.<key>"
  double default_value = 0.0;
  double min = 0.0, max = 0.0;  // inclusive
  bool integer = false;
  std::string help;
};

struct PredictorSpec {
  std::string name;  // "mean", "drift", ...: HybridOptions::predictor
  std::string help;  // one line for `config --keys`
  UpdatePredictor::Input input = UpdatePredictor::Input::Updates;
  std::vector<PredictorOption> options;
  std::function<std::unique_ptr<UpdatePredictor>(const HybridOptions&)> make;
  // Tensor bytes the predictor itself holds for parameters of these element counts, rounded as
  // the tracking allocator rounds (the engine's own buffers are counted by hybrid_state_bytes).
  std::function<int64_t(const std::vector<int64_t>& numels, const HybridOptions&)> state_bytes;
  // Checks that relate its options to each other or to the engine's (optional); throws
  // std::invalid_argument naming the field.
  std::function<void(const HybridOptions&)> validate;
};

// In the order `config --keys` lists them. Adding a predictor: a file that defines its spec and
// one line in src/hybrid/predictor_registry.cpp.
const std::vector<PredictorSpec>& predictor_registry();
// The spec of that name; OptionsError listing the names otherwise.
const PredictorSpec& find_predictor(const std::string& name);
// The option of that key from whichever predictor declares it; null if none does.
const PredictorOption* find_predictor_option(const std::string& key);

// `copies` float32 copies of parameters of these element counts, as the tracking allocator counts
// them (its size-class rounding): what most predictors' state_bytes are made of.
int64_t parameter_copies_bytes(const std::vector<int64_t>& numels, int64_t copies);

// Tensor bytes the hybrid engine keeps between steps for parameters of these element counts:
// the rollback snapshot, the update buffers of predictors that watch updates, and the predictor.
int64_t hybrid_state_bytes(const std::vector<int64_t>& numels, const HybridOptions& options);

}  // namespace ht
