// Validation of HybridOptions: every rejected value is named with the range that is accepted.
#include "hybrid/hybrid/options.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace ht {
namespace {

[[noreturn]] void fail(const std::string& field, const std::string& value, const std::string& need) {
  throw std::invalid_argument("HybridOptions." + field + " = " + value + ": must be " + need);
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
  if (predictor != "mean" && predictor != "regression" && predictor != "drift" && predictor != "last" &&
      predictor != "ema" && predictor != "dmd" && predictor != "rssm") {
    fail("predictor", "\"" + predictor + "\"",
         "one of \"mean\", \"regression\", \"drift\", \"last\", \"ema\", \"dmd\", \"rssm\"");
  }
  if (predictor == "drift" && full_steps < 4) {
    fail("full_steps", str(full_steps),
         ">= 4 with predictor \"drift\" (its slope test fits a line through at least 4 recorded "
         "weights): raise full_steps (hybrid.full_steps in a config) or choose another predictor");
  }
  if (!(drift_tstat >= 0.0)) fail("drift_tstat", str(drift_tstat), ">= 0");
  if (!(ema_beta >= 0.0 && ema_beta < 1.0)) fail("ema_beta", str(ema_beta), "in [0, 1)");
  at_least("dmd_history", dmd_history, 2);
  at_least("dmd_rank", dmd_rank, 1);
  if (dmd_rank >= dmd_history) fail("dmd_rank", str(dmd_rank), "< dmd_history (" + str(dmd_history) + ")");
  in_range("dmd_ridge", dmd_ridge, 0.0, 1.0);
  at_least("rssm_ensemble", rssm_ensemble, 1);
  at_least("rssm_hidden", rssm_hidden, 1);
  at_least("rssm_latent", rssm_latent, 1);
  // Shorter windows would pass here and then switch a feature off without a word.
  if (rssm_window < 4) {
    fail("rssm_window", str(rssm_window),
         ">= 4: the rssm trains on windows of at least 4 recorded steps, so a shorter one never predicts");
  }
  at_least("rssm_train_every", rssm_train_every, 1);
  if (!(rssm_lr > 0.0 && std::isfinite(rssm_lr))) fail("rssm_lr", str(rssm_lr), "> 0");
  at_least("groups", groups, 1);
  if (verify != "batch" && verify != "holdout") {
    fail("verify", "\"" + verify + "\"", "\"batch\" or \"holdout\"");
  }
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
  if (pay_check_clock != "seconds" && pay_check_clock != "steps") {
    fail("pay_check_clock", "\"" + pay_check_clock + "\"", "\"seconds\" or \"steps\"");
  }
  in_range("pay_margin", pay_margin, 0.0, 10.0);
  at_least("reprobe_min", reprobe_min, 1);
  if (reprobe_max < reprobe_min) fail("reprobe_max", str(reprobe_max), ">= reprobe_min (" + str(reprobe_min) + ")");
}

}  // namespace ht
