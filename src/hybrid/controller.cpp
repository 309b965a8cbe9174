// Phase state machine and confidence calibration. Decisions use only what was measured: the
// verifications' outcomes, prediction errors, and loss decrease per second of each mode.
#include "hybrid/controller.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "archive_io.h"

namespace ht {
namespace {

// Older verification outcomes count less: 0.8 per new outcome keeps about the last 5 in view.
constexpr double kOutcomeDecay = 0.8;
constexpr double kErrorEma = 0.3;
constexpr double kRateEma = 0.5;

double clamp01(double x) { return std::min(1.0, std::max(0.0, x)); }

}  // namespace

PhaseController::PhaseController(const HybridOptions& options)
    : opt_(options), horizon_(options.min_predict_steps), reprobe_interval_(options.reprobe_min) {
  if (opt_.warmup_steps == 0) phase_ = Phase::Full;
}

bool PhaseController::recording() const {
  return phase_ == Phase::Correct || (phase_ == Phase::Full && !holding_);
}

double PhaseController::acceptance() const { return (ok_ + 1.0) / (ok_ + bad_ + 2.0); }

double PhaseController::confidence() const {
  // Loss-prediction errors up to two noise units are expected; beyond that trust decays.
  const double loss_term = std::exp(-std::max(0.0, loss_err_ema_ - 2.0) / 2.0);
  const double dir_term = 0.5 + 0.5 * clamp01(cos_ema_);
  return acceptance() * dir_term * loss_term * clamp01(predictor_conf_);
}

double PhaseController::step_scale() const {
  if (opt_.max_step_scale <= 1.0 || probing_) return 1.0;
  const double c = confidence();
  const double t = opt_.enter_confidence >= 1.0 ? 0.0 : clamp01((c - opt_.enter_confidence) / (1.0 - opt_.enter_confidence));
  return 1.0 + (opt_.max_step_scale - 1.0) * t;
}

bool PhaseController::pays() const {
  return rate_samples_ == 0 || pred_rate_ema_ >= opt_.pay_margin * full_rate_ema_;
}

bool PhaseController::decision_due(bool predictor_ready) const {
  return phase_ == Phase::Full && !holding_ && in_phase_ + 1 >= opt_.full_steps && predictor_ready;
}

std::string PhaseController::enter(Phase next, const std::string& why) {
  std::ostringstream os;
  os << phase_name(phase_) << " -> " << phase_name(next) << ": " << why;
  phase_ = next;
  in_phase_ = 0;
  if (next == Phase::Predict) phase_clean_ = true;
  if (next == Phase::Full) probing_ = false;
  return os.str();
}

std::string PhaseController::decide_after_full() {
  std::ostringstream why;
  why.precision(3);
  why << "confidence " << confidence() << " (gate " << opt_.enter_confidence << "), predict "
      << pred_rate_ema_ << " vs full " << full_rate_ema_ << " loss/s";
  const bool gate = confidence() >= opt_.enter_confidence && (!opt_.pay_check || pays());
  if (gate) {
    reprobe_interval_ = opt_.reprobe_min;
    after_hold_ = false;
    probing_ = false;
    return enter(Phase::Predict, why.str() + ", horizon " + std::to_string(horizon_));
  }
  if (after_hold_) {
    after_hold_ = false;
    probing_ = true;
    horizon_ = opt_.min_predict_steps;
    return enter(Phase::Predict, "probe after hold; " + why.str());
  }
  holding_ = true;
  hold_left_ = reprobe_interval_;
  in_phase_ = 0;
  const int64_t held = reprobe_interval_;
  reprobe_interval_ = std::min(2 * reprobe_interval_, opt_.reprobe_max);
  return "full (hold " + std::to_string(held) + " steps without recording): " + why.str();
}

std::string PhaseController::on_real_step(bool predictor_ready) {
  ++in_phase_;
  switch (phase_) {
    case Phase::Warmup:
      if (in_phase_ >= opt_.warmup_steps) return enter(Phase::Full, "warmup done");
      return "";
    case Phase::Correct:
      if (in_phase_ >= opt_.correct_steps) return enter(Phase::Full, "correction done");
      return "";
    case Phase::Full:
      if (holding_) {
        if (--hold_left_ > 0) return "";
        holding_ = false;
        after_hold_ = true;
        in_phase_ = 0;
        return "full: hold over, recording " + std::to_string(opt_.full_steps) + " steps to probe again";
      }
      if (in_phase_ >= opt_.full_steps && predictor_ready) return decide_after_full();
      return "";
    case Phase::Predict:
      break;
  }
  throw std::logic_error("PhaseController::on_real_step called in the predict phase");
}

std::string PhaseController::on_predicted_step() {
  if (phase_ != Phase::Predict) throw std::logic_error("PhaseController::on_predicted_step outside predict");
  ++in_phase_;
  if (in_phase_ < horizon_) return "";
  const int64_t done = horizon_;
  if (phase_clean_) horizon_ = std::min(2 * horizon_, opt_.max_predict_steps);
  return enter(Phase::Correct, std::to_string(done) + " predicted steps kept; next horizon " +
                                   std::to_string(horizon_));
}

std::string PhaseController::on_rollback(int64_t kept) {
  if (phase_ != Phase::Predict) throw std::logic_error("PhaseController::on_rollback outside predict");
  phase_clean_ = false;
  // Shrink to the length that held (at most half), or to a quarter when nothing held.
  horizon_ = std::max<int64_t>(1, kept > 0 ? std::min(kept, horizon_ / 2) : horizon_ / 4);
  return enter(Phase::Correct, "rolled back after " + std::to_string(in_phase_) +
                                   " predicted steps; next horizon " + std::to_string(horizon_));
}

void PhaseController::on_verification(bool accepted) {
  ok_ = ok_ * kOutcomeDecay + (accepted ? 1.0 : 0.0);
  bad_ = bad_ * kOutcomeDecay + (accepted ? 0.0 : 1.0);
}

void PhaseController::on_loss_error(double relative_error) {
  // Capped: one wild miss lowers trust for a while, it does not end prediction for good.
  if (!std::isfinite(relative_error) || relative_error > 10.0) relative_error = 10.0;
  loss_err_ema_ += kErrorEma * (relative_error - loss_err_ema_);
}

void PhaseController::on_direction_error(double cosine) {
  if (!std::isfinite(cosine)) cosine = -1.0;
  cos_ema_ += kErrorEma * (cosine - cos_ema_);
}

void PhaseController::on_rates(double predict_rate, double full_rate) {
  if (!std::isfinite(predict_rate) || !std::isfinite(full_rate)) return;
  if (rate_samples_ == 0) {
    pred_rate_ema_ = predict_rate;
    full_rate_ema_ = full_rate;
  } else {
    pred_rate_ema_ += kRateEma * (predict_rate - pred_rate_ema_);
    full_rate_ema_ += kRateEma * (full_rate - full_rate_ema_);
  }
  ++rate_samples_;
}

void PhaseController::save(torch::serialize::OutputArchive& a) const {
  using archive_io::put;
  put(a, "phase", static_cast<int64_t>(phase_));
  put(a, "in_phase", in_phase_);
  put(a, "horizon", horizon_);
  put(a, "holding", holding_);
  put(a, "hold_left", hold_left_);
  put(a, "after_hold", after_hold_);
  put(a, "probing", probing_);
  put(a, "phase_clean", phase_clean_);
  put(a, "reprobe_interval", reprobe_interval_);
  put(a, "ok", ok_);
  put(a, "bad", bad_);
  put(a, "cos_ema", cos_ema_);
  put(a, "loss_err_ema", loss_err_ema_);
  put(a, "predictor_conf", predictor_conf_);
  put(a, "pred_rate_ema", pred_rate_ema_);
  put(a, "full_rate_ema", full_rate_ema_);
  put(a, "rate_samples", rate_samples_);
}

void PhaseController::load(torch::serialize::InputArchive& a) {
  using namespace archive_io;
  const int64_t p = get_int(a, "phase");
  if (p < 0 || p > 3) throw std::runtime_error("hybrid state: unknown phase " + std::to_string(p));
  phase_ = static_cast<Phase>(p);
  in_phase_ = get_int(a, "in_phase");
  horizon_ = get_int(a, "horizon");
  holding_ = get_bool(a, "holding");
  hold_left_ = get_int(a, "hold_left");
  after_hold_ = get_bool(a, "after_hold");
  probing_ = get_bool(a, "probing");
  phase_clean_ = get_bool(a, "phase_clean");
  reprobe_interval_ = get_int(a, "reprobe_interval");
  ok_ = get_double(a, "ok");
  bad_ = get_double(a, "bad");
  cos_ema_ = get_double(a, "cos_ema");
  loss_err_ema_ = get_double(a, "loss_err_ema");
  predictor_conf_ = get_double(a, "predictor_conf");
  pred_rate_ema_ = get_double(a, "pred_rate_ema");
  full_rate_ema_ = get_double(a, "full_rate_ema");
  rate_samples_ = get_int(a, "rate_samples");
}

}  // namespace ht
