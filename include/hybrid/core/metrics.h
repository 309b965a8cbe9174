// What the trainer reports: one record per step and per evaluation, plus messages.
// The library never prints; a Logger decides where records go (terminal, JSON Lines, tests).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ht {

// What a step did. Plain training has only full steps; the hybrid engine cycles through all four:
// warmup and full steps are ordinary ones (full steps also record the weights), predict steps
// move the weights by a prediction without a backward pass, correct steps are real steps after them.
enum class Phase { Warmup = 0, Full = 1, Predict = 2, Correct = 3 };
constexpr int kPhases = 4;
const char* phase_name(Phase phase);  // "warmup" | "full" | "predict" | "correct"

struct StepRecord {
  int64_t step = 0;           // 1-based count of steps completed
  Phase phase = Phase::Full;
  double loss = NAN;          // training loss of this step's batch
  double lr = NAN;
  double grad_norm = NAN;     // before clipping; NaN on steps without backward
  double ms = 0.0;            // wall-clock for the step
  double items_per_sec = 0.0; // tokens or samples per second
  int64_t tensor_bytes = 0;   // allocator current bytes at the end of the step
  int64_t peak_bytes = 0;     // allocator peak bytes during the step
  int64_t cached_bytes = 0;   // freed blocks the allocator holds at the end (reserved = tensor + cached)
  // Peak tensor bytes within each part of the step (memory_monitor.h); -1: the part did not run.
  int64_t peak_forward_bytes = -1;
  int64_t peak_backward_bytes = -1;
  int64_t peak_optimizer_bytes = -1;
  int64_t peak_predict_bytes = -1;
  std::map<std::string, double> extra;  // strategy-specific figures (predicted loss, confidence...)
};

struct EvalRecord {
  int64_t step = 0;
  double val_loss = NAN;
  double accuracy = NAN;  // NaN when the objective has no accuracy
  std::map<std::string, double> metrics;  // user metrics (Trainer::add_metric), by name
  int64_t items = 0;
  double ms = 0.0;
};

enum class Level { Debug, Info, Warning, Error };

class Logger {
 public:
  virtual ~Logger() = default;
  virtual void on_step(const StepRecord&) {}
  virtual void on_eval(const EvalRecord&) {}
  virtual void on_message(Level, const std::string&) {}
  virtual void on_checkpoint(const std::string& /*path*/, int64_t /*step*/) {}
};

// Fans records out to several loggers.
class MultiLogger : public Logger {
 public:
  void add(std::shared_ptr<Logger> logger) { loggers_.push_back(std::move(logger)); }
  void on_step(const StepRecord& r) override { for (auto& l : loggers_) l->on_step(r); }
  void on_eval(const EvalRecord& r) override { for (auto& l : loggers_) l->on_eval(r); }
  void on_message(Level lv, const std::string& m) override { for (auto& l : loggers_) l->on_message(lv, m); }
  void on_checkpoint(const std::string& p, int64_t s) override { for (auto& l : loggers_) l->on_checkpoint(p, s); }
 private:
  std::vector<std::shared_ptr<Logger>> loggers_;
};

// One JSON object per line: {"type":"step",...} and {"type":"eval",...}. Flushed per record.
std::shared_ptr<Logger> make_jsonl_logger(const std::string& path, bool append);
std::string to_json(const StepRecord& r);
std::string to_json(const EvalRecord& r);

}  // namespace ht
