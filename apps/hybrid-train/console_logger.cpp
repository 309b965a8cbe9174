// Terminal output of the CLI: a live progress line with ETA on a terminal, plain lines when piped.
#include "console_logger.h"

#include <unistd.h>

#include <cmath>
#include <string>

#include <fmt/format.h>

namespace ht::cli {
namespace {

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// Predicted steps verified on a held-out probe have no loss of their own: show a dash, not "nan".
std::string loss_text(double loss) { return std::isfinite(loss) ? fmt::format("{:.4f}", loss) : "   -  "; }

std::string mib(int64_t bytes) { return fmt::format("{:.0f} MiB", bytes / 1048576.0); }

}  // namespace

ConsoleLogger::ConsoleLogger(int64_t total_steps, int64_t print_every, std::FILE* out)
    : out_(out), live_(::isatty(::fileno(out)) != 0), total_steps_(total_steps),
      print_every_(print_every < 1 ? 1 : print_every), start_(std::chrono::steady_clock::now()) {}

void ConsoleLogger::set_total_steps(int64_t total, int64_t first_step) {
  total_steps_ = total;
  first_step_ = first_step;
  start_ = std::chrono::steady_clock::now();
}

void ConsoleLogger::end_live_line() {
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
}

void ConsoleLogger::on_step(const StepRecord& r) {
  smoothed_ms_ = smoothed_ms_ == 0.0 ? r.ms : 0.9 * smoothed_ms_ + 0.1 * r.ms;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = r.step - first_step_;
  const double eta = done > 0 ? elapsed / done * static_cast<double>(total_steps_ - r.step) : NAN;
  const std::string body = fmt::format(
      "step {:>6}/{} {:<7} loss {}  lr {:.2e}  {:.0f} ms/step  {:.0f} items/s  mem {} (peak {})  ETA {}",
      r.step, total_steps_, phase_name(r.phase), loss_text(r.loss), r.lr, smoothed_ms_, r.items_per_sec, mib(r.tensor_bytes),
      mib(r.peak_bytes), duration(eta));
  if (live_) {
    std::fprintf(out_, "\r\033[K%s", body.c_str());
    line_open_ = true;
    std::fflush(out_);
  } else if (r.step % print_every_ == 0 || r.step == total_steps_) {
    std::fprintf(out_, "%s\n", body.c_str());
    std::fflush(out_);
  }
}

void ConsoleLogger::on_eval(const EvalRecord& r) {
  end_live_line();
  std::string line = fmt::format("eval  step {:>6}  val_loss {:.4f}", r.step, r.val_loss);
  if (std::isfinite(r.accuracy)) line += fmt::format("  accuracy {:.2f} %", 100.0 * r.accuracy);
  line += fmt::format("  ({:.1f} s)", r.ms / 1000.0);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ConsoleLogger::on_message(Level level, const std::string& text) {
  if (level == Level::Debug) return;
  end_live_line();
  static const char* prefix[] = {"", "", "warning: ", "error: "};
  std::fprintf(out_, "%s%s\n", prefix[static_cast<int>(level)], text.c_str());
  std::fflush(out_);
}

void ConsoleLogger::on_checkpoint(const std::string& path, int64_t step) {
  if (live_) return;  // the live line would be broken up by every save; the JSONL has them
  std::fprintf(out_, "checkpoint step %lld -> %s\n", static_cast<long long>(step), path.c_str());
  std::fflush(out_);
}

}  // namespace ht::cli
