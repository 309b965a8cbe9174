// The CLI against the reliability defects of issue 24: each test reproduces one defect through
// the built binary (exit code and message), so a regression shows as the failure a user saw.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/cli_run.h"

namespace ht {
namespace fs = std::filesystem;
using testing::cli_scratch;
using testing::CliResult;
using testing::run_cli;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// Defect 3: a directory was read as an empty config, and the default 2,000-step run started.
TEST(CliDefects, ADirectoryAsTheConfigFileIsAUsageError) {
  const std::string dir = cli_scratch("config-dir");
  fs::create_directories(dir);
  for (const std::string command : {"train", "config", "plan"}) {
    const CliResult r = run_cli(command + " " + dir + " run.out_dir=" + dir + "/out train.steps=1", 60);
    EXPECT_EQ(r.code, 2) << command << ": " << r.output;
    EXPECT_TRUE(contains(r.output, dir)) << command << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "directory")) << command << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/out")) << "a run started";
  fs::remove_all(dir);
}

}  // namespace ht
