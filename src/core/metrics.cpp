// JSON Lines output of step and eval records: one object per line, each written whole by one
// write() so a crash or a `tail -f` sees every finished step and never half of one.
#include "hybrid/core/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ht {
namespace {

// JSON has no NaN: absent figures become null.
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

class JsonlLogger final : public Logger {
 public:
  JsonlLogger(const std::string& path, bool append) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd_ < 0)
      throw MetricsWriteError("cannot open metrics file '" + path + "' for writing: " + std::strerror(errno));
    if (append) drop_torn_last_line();
  }
  ~JsonlLogger() override {
    if (fd_ >= 0) ::close(fd_);
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
  // A record is one write() of the whole line: a crash leaves whole lines. A write that fails
  // part-way (disk full, file size limit) is cut back to the last whole line and reported.
  void write(const std::string& record) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;  // reported once; the error ends the run
    const std::string line = record + '\n';
    struct stat st {};
    const bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
    const off_t before = regular ? st.st_size : 0;
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t w = ::write(fd_, line.data() + done, line.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const std::string why = w < 0 ? std::strerror(errno) : "nothing written";
        failed_ = true;
        if (done > 0 && regular && ::ftruncate(fd_, before) != 0) {
          throw MetricsWriteError("writing metrics file '" + path_ + "' failed (" + why +
                                  ") and its last line could not be cut back: it ends in half a record");
        }
        throw MetricsWriteError("writing metrics file '" + path_ + "' failed: " + why +
                                " (is the disk full?); it ends at the last whole record");
      }
      done += static_cast<size_t>(w);
    }
  }

  // Text after the last newline is a record a crash cut short: appending after it would glue the
  // next record onto it.
  void drop_torn_last_line() {
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
    std::ifstream in(path_, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.empty() || text.back() == '\n') return;
    const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0)
      throw MetricsWriteError("metrics file '" + path_ + "' ends in half a record that cannot be cut off: " +
                              std::strerror(errno));
  }

  std::string path_;
  int fd_ = -1;
  bool failed_ = false;
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
