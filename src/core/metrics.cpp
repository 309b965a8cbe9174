// JSON Lines output of step and eval records: one object per line, flushed so a crash or a
// `tail -f` sees every finished step.
#include "hybrid/core/metrics.h"

#include <cmath>
#include <fstream>
#include <mutex>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ht {
namespace {

// JSON has no NaN: absent figures become null.
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

class JsonlLogger final : public Logger {
 public:
  JsonlLogger(const std::string& path, bool append)
      : out_(path, append ? std::ios::app : std::ios::trunc) {
    if (!out_) throw std::runtime_error("cannot open metrics file '" + path + "' for writing");
  }
  void on_step(const StepRecord& r) override { write(to_json(r)); }
  void on_eval(const EvalRecord& r) override { write(to_json(r)); }
  void on_message(Level lv, const std::string& m) override {
    static const char* names[] = {"debug", "info", "warning", "error"};
    write(nlohmann::json{{"type", "message"}, {"level", names[static_cast<int>(lv)]}, {"text", m}}.dump());
  }
  void on_checkpoint(const std::string& p, int64_t s) override {
    write(nlohmann::json{{"type", "checkpoint"}, {"step", s}, {"path", p}}.dump());
  }

 private:
  void write(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    out_ << line << '\n';
    out_.flush();
  }
  std::ofstream out_;
  std::mutex mu_;
};

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Warmup: return "warmup";
    case Phase::Full: return "full";
    case Phase::Predict: return "predict";
    case Phase::Correct: return "correct";
  }
  return "?";
}

std::string to_json(const StepRecord& r) {
  nlohmann::json j{{"type", "step"},          {"step", r.step},
                   {"phase", phase_name(r.phase)},        {"loss", number(r.loss)},
                   {"lr", number(r.lr)},      {"grad_norm", number(r.grad_norm)},
                   {"ms", number(r.ms)},      {"items_per_sec", number(r.items_per_sec)},
                   {"tensor_bytes", r.tensor_bytes}, {"peak_bytes", r.peak_bytes},
                   {"cached_bytes", r.cached_bytes}};
  // A phase that did not run has no key (predict steps have no backward).
  const std::pair<const char*, int64_t> phases[] = {{"peak_forward_bytes", r.peak_forward_bytes},
                                                    {"peak_backward_bytes", r.peak_backward_bytes},
                                                    {"peak_optimizer_bytes", r.peak_optimizer_bytes},
                                                    {"peak_predict_bytes", r.peak_predict_bytes}};
  for (const auto& [key, bytes] : phases)
    if (bytes >= 0) j[key] = bytes;
  for (const auto& kv : r.extra) j[kv.first] = number(kv.second);
  return j.dump();
}

std::string to_json(const EvalRecord& r) {
  nlohmann::json j{{"type", "eval"},  {"step", r.step},  {"val_loss", number(r.val_loss)},
                   {"accuracy", number(r.accuracy)}, {"items", r.items}, {"ms", number(r.ms)}};
  for (const auto& [name, value] : r.metrics) j[name] = number(value);
  return j.dump();
}

std::shared_ptr<Logger> make_jsonl_logger(const std::string& path, bool append) {
  return std::make_shared<JsonlLogger>(path, append);
}

}  // namespace ht
