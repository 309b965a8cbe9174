// The hybrid strategy's state in a checkpoint: controller, divergence windows, rollback snapshot,
// predictor, probe batch and every counter, so a run resumed mid-phase continues bit-exactly.
#include <torch/torch.h>

#include "archive_io.h"
#include "hybrid/hybrid_engine.h"

namespace ht {

void HybridEngine::save(torch::serialize::OutputArchive& a) const {
  using archive_io::put;
  // Version 2: trajectory predictors keep strided samples instead of the full last prediction.
  // Version 3: the summary counts undone predicted steps and recorded steps.
  put(a, "version", int64_t{3});
  put(a, "predictor_name", predictor_->name());
  torch::serialize::OutputArchive c(a.compilation_unit()), d(a.compilation_unit()),
      s(a.compilation_unit()), p(a.compilation_unit());
  ctl_.save(c);
  div_.save(d);
  snapshot_.save(s);
  predictor_->save(p);
  a.write("controller", c);
  a.write("divergence", d);
  a.write("snapshot", s);
  a.write("predictor", p);

  put(a, "lr_observed", lr_observed_);
  put(a, "ahead", ahead_);
  put(a, "contiguous", contiguous_);
  put(a, "stretch_n", stretch_n_);
  put(a, "stretch_open", stretch_open_);
  put(a, "last_scale", last_scale_);
  // Trajectory predictors compare the next stretch with the last applied prediction.
  const bool samples = predictor_->input() == UpdatePredictor::Input::Weights && !first_sample_.empty();
  put(a, "has_samples", samples);
  if (samples) {
    archive_io::put_tensors(a, "first_sample", first_sample_);
    archive_io::put_tensors(a, "applied_sample", applied_sample_);
  }
  put(a, "measure_next", measure_next_);
  put(a, "measure_ahead", measure_ahead_);
  put(a, "measure_scale", measure_scale_);
  put(a, "loss_ema", loss_ema_);
  put(a, "loss_var", loss_var_);
  put(a, "loss_slope", loss_slope_);
  put(a, "have_probe", have_probe_);
  if (have_probe_) {
    a.write("probe_input", probe_.input, true);
    a.write("probe_target", probe_.target, true);
  }
  put(a, "phases_on_probe", phases_on_probe_);
  put(a, "ref_loss", ref_loss_);
  put(a, "ref_ahead", ref_ahead_);
  put(a, "phase_start_ahead", phase_start_ahead_);
  put(a, "entry_loss", entry_loss_);
  put(a, "decision_loss", decision_loss_);
  put(a, "have_decision_loss", have_decision_loss_);
  put(a, "phase_sum", phase_sum_);
  put(a, "phase_n", phase_n_);
  put(a, "phase_ms", phase_ms_);
  put(a, "stretch_ms", stretch_ms_);
  put(a, "stretch_steps", stretch_steps_);
  put(a, "probe_slope", probe_slope_);
  put(a, "have_probe_slope", have_probe_slope_);
  put(a, "end_loss", end_loss_);
  put(a, "have_end_loss", have_end_loss_);
  put(a, "pending_pred_rate", pending_pred_rate_);

  const HybridSummary& m = summary_;
  put(a, "s_steps", m.steps);
  put(a, "s_steps_by_phase", std::vector<double>(m.steps_by_phase, m.steps_by_phase + 4));
  put(a, "s_ms_by_phase", std::vector<double>(m.ms_by_phase, m.ms_by_phase + 4));
  put(a, "s_counts", std::vector<double>{double(m.predicted_applied), double(m.predicted_kept),
                                         double(m.verifications), double(m.accepted), double(m.rollbacks),
                                         double(m.verify_forwards), double(m.phases_predict),
                                         double(m.predicted_undone), double(m.recorded_steps)});
  put(a, "s_plain_ms", m.plain_step_ms);
  put(a, "s_recorded_ms", m.recorded_step_ms);
}

void HybridEngine::load(torch::serialize::InputArchive& a) {
  using namespace archive_io;
  const std::string name = get_string(a, "predictor_name");
  if (name != predictor_->name()) {
    throw std::runtime_error("hybrid state was saved with predictor \"" + name + "\", this run uses \"" +
                             predictor_->name() + "\": resume with the same hybrid.predictor");
  }
  if (get_int(a, "version") < 3) {
    throw std::runtime_error("hybrid state in this checkpoint is version " + std::to_string(get_int(a, "version")) +
                             " (an earlier build); this build reads version 3: start the run again or "
                             "resume it with the build that wrote it");
  }
  torch::serialize::InputArchive c, d, s, p;
  a.read("controller", c);
  a.read("divergence", d);
  a.read("snapshot", s);
  a.read("predictor", p);
  ctl_.load(c);
  div_.load(d);
  snapshot_.load(s);
  predictor_->load(p);

  lr_observed_ = get_double(a, "lr_observed");
  ahead_ = get_int(a, "ahead");
  contiguous_ = get_bool(a, "contiguous");
  stretch_n_ = get_int(a, "stretch_n");
  stretch_open_ = get_bool(a, "stretch_open");
  last_scale_ = get_double(a, "last_scale");
  if (get_bool(a, "has_samples")) {
    get_tensors_into(a, "first_sample", first_sample_);
    get_tensors_into(a, "applied_sample", applied_sample_);
  }
  measure_next_ = get_bool(a, "measure_next");
  measure_ahead_ = get_int(a, "measure_ahead");
  measure_scale_ = get_double(a, "measure_scale");
  loss_ema_ = get_double(a, "loss_ema");
  loss_var_ = get_double(a, "loss_var");
  loss_slope_ = get_double(a, "loss_slope");
  have_probe_ = get_bool(a, "have_probe");
  if (have_probe_) {
    probe_.input = get_tensor(a, "probe_input");
    probe_.target = get_tensor(a, "probe_target");
  }
  phases_on_probe_ = get_int(a, "phases_on_probe");
  ref_loss_ = get_double(a, "ref_loss");
  ref_ahead_ = get_int(a, "ref_ahead");
  phase_start_ahead_ = get_int(a, "phase_start_ahead");
  entry_loss_ = get_double(a, "entry_loss");
  decision_loss_ = get_double(a, "decision_loss");
  have_decision_loss_ = get_bool(a, "have_decision_loss");
  phase_sum_ = get_double(a, "phase_sum");
  phase_n_ = get_int(a, "phase_n");
  phase_ms_ = get_double(a, "phase_ms");
  stretch_ms_ = get_double(a, "stretch_ms");
  stretch_steps_ = get_int(a, "stretch_steps");
  probe_slope_ = get_double(a, "probe_slope");
  have_probe_slope_ = get_bool(a, "have_probe_slope");
  end_loss_ = get_double(a, "end_loss");
  have_end_loss_ = get_bool(a, "have_end_loss");
  pending_pred_rate_ = get_double(a, "pending_pred_rate");

  HybridSummary& m = summary_;
  m.steps = get_int(a, "s_steps");
  const auto sp = get_doubles(a, "s_steps_by_phase");
  const auto ms = get_doubles(a, "s_ms_by_phase");
  const auto n = get_doubles(a, "s_counts");
  if (sp.size() != 4 || ms.size() != 4 || n.size() != 9) throw std::runtime_error("hybrid state: bad summary");
  for (int i = 0; i < 4; ++i) {
    m.steps_by_phase[i] = static_cast<int64_t>(sp[i]);
    m.ms_by_phase[i] = ms[i];
  }
  m.predicted_applied = static_cast<int64_t>(n[0]);
  m.predicted_kept = static_cast<int64_t>(n[1]);
  m.verifications = static_cast<int64_t>(n[2]);
  m.accepted = static_cast<int64_t>(n[3]);
  m.rollbacks = static_cast<int64_t>(n[4]);
  m.verify_forwards = static_cast<int64_t>(n[5]);
  m.phases_predict = static_cast<int64_t>(n[6]);
  m.predicted_undone = static_cast<int64_t>(n[7]);
  m.recorded_steps = static_cast<int64_t>(n[8]);
  m.plain_step_ms = get_double(a, "s_plain_ms");
  m.recorded_step_ms = get_double(a, "s_recorded_ms");
}

}  // namespace ht
