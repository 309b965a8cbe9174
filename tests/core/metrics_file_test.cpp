// metrics.jsonl under a full disk: a failed write is an error naming the file, and the file ends
// in whole lines (a partial record is cut off again; a torn last line is dropped on append).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hybrid/core/metrics.h"
#include "support/scratch_dir.h"

namespace ht {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every line is a JSON object and the text ends with a newline (or is empty).
void expect_whole_json_lines(const std::string& text) {
  EXPECT_TRUE(text.empty() || text.back() == '\n') << "ends in half a line: ..." << text.substr(text.size() - std::min<size_t>(text.size(), 80));
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) EXPECT_NO_THROW(nlohmann::json::parse(line)) << line;
}

StepRecord record(int64_t step) {
  StepRecord r;
  r.step = step;
  r.loss = 1.0 / static_cast<double>(step + 1);
  r.extra["confidence"] = 0.5;
  return r;
}

}  // namespace

// RLIMIT_FSIZE stands in for a full disk: past the limit write() stores what fits and then
// fails with EFBIG (SIGXFSZ ignored). In a child process, so the limit binds nothing else.
TEST(MetricsFile, AFailedWriteIsAnErrorAndTheFileEndsInAWholeLine) {
  const testing::ScratchDir scratch;
  const std::string path = scratch.file("metrics.jsonl");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1000, 1000};  // bytes: a few records, the last one cut
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 3;  // no error after 200 records: the failure went unnoticed
    try {
      auto logger = make_jsonl_logger(path, /*append=*/false);
      for (int64_t i = 0; i < 200; ++i) logger->on_step(record(i));
    } catch (const std::exception& e) {
      code = std::string(e.what()).find(path) != std::string::npos ? 0 : 4;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: no error was raised, 4: the error did not name the file";
  const std::string text = read_all(path);
  EXPECT_GT(text.size(), 0u);
  EXPECT_LE(text.size(), 1000u);
  expect_whole_json_lines(text);
}

// A crash (or an old build) may have left half a record: appending drops it first.
TEST(MetricsFile, ATornLastLineIsDroppedWhenAppending) {
  const testing::ScratchDir scratch;
  const std::string path = scratch.file("metrics.jsonl");
  std::ofstream(path) << "{\"type\":\"step\",\"step\":1}\n{\"type\":\"step\",\"st";
  make_jsonl_logger(path, /*append=*/true)->on_step(record(2));
  const std::string text = read_all(path);
  expect_whole_json_lines(text);
  EXPECT_EQ(text.rfind("{\"type\":\"step\",\"step\":1}\n", 0), 0u) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

}  // namespace ht
