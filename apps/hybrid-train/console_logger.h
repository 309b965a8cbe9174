// Terminal output of the CLI: a live progress line with ETA on a terminal, plain lines when piped.
// The library reports through ht::Logger; this is the only place that prints training progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "hybrid/core/metrics.h"

namespace ht::cli {

class ConsoleLogger : public Logger {
 public:
  // print_every: plain-line mode prints every n-th step (and every eval/message).
  ConsoleLogger(int64_t total_steps, int64_t print_every, std::FILE* out = stdout);
  void on_step(const StepRecord& r) override;
  void on_eval(const EvalRecord& r) override;
  void on_message(Level level, const std::string& text) override;
  void on_checkpoint(const std::string& path, int64_t step) override;
  void set_total_steps(int64_t total, int64_t first_step);

 private:
  void end_live_line();
  std::FILE* out_;
  bool live_;
  bool line_open_ = false;
  int64_t total_steps_;
  int64_t first_step_ = 0;
  int64_t print_every_;
  double smoothed_ms_ = 0.0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ht::cli
