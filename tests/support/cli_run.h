// Runs the built hybrid-train binary (HT_BINARY_PATH, or $HT_BINARY) from a test: exit code or
// the signal that ended it, output, and a time limit so a hang fails the test, not the suite.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include "support/remove_tree.h"

namespace ht::testing {

struct CliResult {
  int code = -1;       // exit status; -1 when the process did not exit by itself
  int signal = 0;      // the signal that ended it, if one did (SIGKILL after a time limit)
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

inline std::string cli_binary() {
  const char* b = std::getenv("HT_BINARY");  // lets the suite test an installed binary
  return b ? b : HT_BINARY_PATH;
}

// A directory per test and process (ctest runs test binaries side by side), emptied first.
inline std::string cli_scratch(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("ht-cli-" + std::to_string(::getpid()) + "-" + name);
  ht::testing::remove_tree(d);
  return d.string();
}

// One run of the binary through `sh -c "exec hybrid-train ARGS"` (so ARGS may quote), its output
// in a file rather than a pipe (a full pipe would stall a child nobody reads yet). fork/exec and
// waitpid rather than popen: the exit status 130 and death by SIGINT must read differently.
class CliProcess {
 public:
  explicit CliProcess(const std::string& args) {
    static int counter = 0;
    output_path_ = (std::filesystem::temp_directory_path() /
                    ("ht-cli-out-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
                       .string();
    const std::string cmd = "exec " + cli_binary() + " " + args;
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~CliProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove(output_path_, ignored);
  }
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() {
    if (reaped_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) record(status);
    return !reaped_;
  }
  // Waits for the process; past `timeout_s` it is killed and the result says so.
  CliResult wait(double timeout_s = 120) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        record(status);
        result_.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::ifstream in(output_path_);
    std::stringstream text;
    text << in.rdbuf();
    result_.output = text.str();
    return result_;
  }

 private:
  void record(int status) {
    reaped_ = true;
    if (WIFEXITED(status)) result_.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result_.signal = WTERMSIG(status);
  }
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string output_path_;
  CliResult result_;
};

inline CliResult run_cli(const std::string& args, double timeout_s = 120) {
  CliProcess p(args);
  return p.wait(timeout_s);
}

inline bool kjv_available() { return std::system("command -v bible >/dev/null 2>&1") == 0; }

}  // namespace ht::testing
