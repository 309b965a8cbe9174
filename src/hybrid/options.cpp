// Validation of HybridOptions: every rejected value is named with the range that is accepted.
#include "hybrid/hybrid/options.h"

#include "hybrid/core/errors.h"
#include "hybrid/hybrid/predictor_registry.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace ht {
namespace {

[[noreturn]] void fail(const std::string& field, const std::string& value, const std::string& need) {
  throw OptionsError("HybridOptions." + field + " = " + value + ": must be " + need);
}

template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void at_least(const char* field, int64_t v, int64_t lo) {
  if (v < lo) fail(field, str(v), ">= " + str(lo));
}

void in_range(const char* field, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) fail(field, str(v), "in [" + str(lo) + ", " + str(hi) + "]");
}

}  // namespace

void HybridOptions::validate() const {
  at_least("warmup_steps", warmup_steps, 0);
  at_least("full_steps", full_steps, 1);
  at_least("correct_steps", correct_steps, 1);
  at_least("min_predict_steps", min_predict_steps, 1);
  at_least("max_predict_steps", max_predict_steps, 1);
  if (max_predict_steps < min_predict_steps) {
    fail("max_predict_steps", str(max_predict_steps), ">= min_predict_steps (" + str(min_predict_steps) + ")");
  }
  const PredictorSpec& spec = find_predictor(predictor);
  for (const auto& [key, value] : predictor_options) {
    const PredictorOption* o = find_predictor_option(key);
    if (!o) fail("predictor_options", "{\"" + key + "\"}", "an option some predictor declares");
    if (!(value >= o->min && value <= o->max) || (o->integer && value != std::floor(value)))
      fail(key, str(value), std::string(o->integer ? "an integer" : "a number") + " in [" + str(o->min) + ", " +
                                str(o->max) + "]");
  }
  if (spec.validate) spec.validate(*this);
  at_least("groups", groups, 1);
  at_least("verify_every", verify_every, 1);
  at_least("probe_batches", probe_batches, 1);
  in_range("tolerance", tolerance, 0.0, 1.0);
  in_range("min_step_worth", min_step_worth, 0.0, 16.0);
  if (!(spike_zscore > 0.0)) fail("spike_zscore", str(spike_zscore), "> 0");
  if (loss_window < 8) {
    fail("loss_window", str(loss_window),
         ">= 8: the loss-spike test needs 8 real-step losses in the window, so a shorter one turns it off");
  }
  if (!(grad_explosion > 1.0)) fail("grad_explosion", str(grad_explosion), "> 1");
  in_range("enter_confidence", enter_confidence, 0.0, 1.0);
  in_range("max_step_scale", max_step_scale, 1.0, 16.0);
  in_range("pay_margin", pay_margin, 0.0, 10.0);
  at_least("reprobe_min", reprobe_min, 1);
  if (reprobe_max < reprobe_min) fail("reprobe_max", str(reprobe_max), ">= reprobe_min (" + str(reprobe_min) + ")");
}

double HybridOptions::predictor_option(const std::string& key) const {
  if (const auto it = predictor_options.find(key); it != predictor_options.end()) return it->second;
  const PredictorOption* o = find_predictor_option(key);
  if (!o) throw std::logic_error("no predictor declares the option '" + key + "'");
  return o->default_value;
}

HybridOptions::Verify parse_verify(const std::string& name) {
  if (name == "batch") return HybridOptions::Verify::Batch;
  if (name == "holdout") return HybridOptions::Verify::Holdout;
  throw OptionsError("HybridOptions.verify = \"" + name + "\": must be \"batch\" or \"holdout\"");
}

const char* to_string(HybridOptions::Verify verify) {
  return verify == HybridOptions::Verify::Batch ? "batch" : "holdout";
}

HybridOptions::Clock parse_clock(const std::string& name) {
  if (name == "seconds") return HybridOptions::Clock::Seconds;
  if (name == "steps") return HybridOptions::Clock::Steps;
  throw OptionsError("HybridOptions.pay_check_clock = \"" + name + "\": must be \"seconds\" or \"steps\"");
}

const char* to_string(HybridOptions::Clock clock) {
  return clock == HybridOptions::Clock::Steps ? "steps" : "seconds";
}

}  // namespace ht
