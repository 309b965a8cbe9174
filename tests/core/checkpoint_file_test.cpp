// Crash-safe checkpoint files: round trip, and truncation / corruption / wrong files detected.
// Also pruning, which must never delete the file just written.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "hybrid/core/checkpoint_file.h"
#include "support/remove_tree.h"

namespace ht {
namespace fs = std::filesystem;

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ht-ckpt-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ht::testing::remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { ht::testing::remove_tree(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(CheckpointFileTest, RoundTripsAndLeavesNoTempFile) {
  const std::string payload(100000, 'x');
  write_checkpoint_file(path("a.ht"), payload);
  EXPECT_EQ(read_checkpoint_file(path("a.ht")), payload);
  EXPECT_FALSE(fs::exists(path("a.ht.tmp")));
}

TEST_F(CheckpointFileTest, DetectsTruncation) {
  write_checkpoint_file(path("a.ht"), std::string(5000, 'y'));
  fs::resize_file(path("a.ht"), 3000);
  try {
    read_checkpoint_file(path("a.ht"));
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointFileTest, DetectsAFlippedByte) {
  write_checkpoint_file(path("a.ht"), std::string(5000, 'z'));
  {
    std::fstream f(path("a.ht"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2500);
    f.put('Q');
  }
  try {
    read_checkpoint_file(path("a.ht"));
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointFileTest, RejectsFilesThatAreNotCheckpoints) {
  std::ofstream(path("notes.ht")) << "hello, this is not a checkpoint at all";
  EXPECT_THROW(read_checkpoint_file(path("notes.ht")), CheckpointError);
  EXPECT_THROW(read_checkpoint_file(path("missing.ht")), CheckpointError);
}

TEST_F(CheckpointFileTest, ListsNewestFirstAndPrunesToKeepLast) {
  for (int step : {5, 100, 20, 7}) write_checkpoint_file(checkpoint_path(dir_.string(), step), "p");
  auto all = list_checkpoints(dir_.string());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], checkpoint_path(dir_.string(), 100));
  EXPECT_EQ(all[3], checkpoint_path(dir_.string(), 5));
  prune_checkpoints(dir_.string(), 2, checkpoint_path(dir_.string(), 100));
  all = list_checkpoints(dir_.string());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1], checkpoint_path(dir_.string(), 20));
}

// A hybrid rollback (or another run in the same directory) can leave checkpoints of higher steps
// than the one just written: pruning keeps the new file and does not touch those.
TEST_F(CheckpointFileTest, PruningNeverDeletesTheNewFileOrCheckpointsAboveIt) {
  for (int step : {10, 20, 30, 100}) write_checkpoint_file(checkpoint_path(dir_.string(), step), "p");
  const std::string fresh = checkpoint_path(dir_.string(), 25);
  write_checkpoint_file(fresh, "p");
  prune_checkpoints(dir_.string(), 2, fresh);
  const std::vector<std::string> expected = {checkpoint_path(dir_.string(), 100),
                                             checkpoint_path(dir_.string(), 30), fresh,
                                             checkpoint_path(dir_.string(), 20)};
  EXPECT_EQ(list_checkpoints(dir_.string()), expected);
  prune_checkpoints(dir_.string(), 1, fresh);
  EXPECT_EQ(list_checkpoints(dir_.string()),
            (std::vector<std::string>{checkpoint_path(dir_.string(), 100),
                                      checkpoint_path(dir_.string(), 30), fresh}));
}

TEST_F(CheckpointFileTest, CreatesMissingDirectoriesAndLeavesNoTempFile) {
  const std::string nested = (dir_ / "a" / "b" / "ckpt-000000001.ht").string();
  write_checkpoint_file(nested, "payload");
  EXPECT_EQ(read_checkpoint_file(nested), "payload");
  EXPECT_FALSE(std::filesystem::exists(nested + ".tmp"));
}

// A stray name whose step is past int64 is reported, not thrown over, and pruning ignores it.
TEST_F(CheckpointFileTest, NamesThatDoNotParseAreSkippedAndReported) {
  write_checkpoint_file(checkpoint_path(dir_.string(), 7), "p");
  const std::string odd = path("ckpt-99999999999999999999999.ht");
  std::ofstream(odd) << "x";
  std::vector<SkippedCheckpoint> skipped;
  EXPECT_EQ(list_checkpoints(dir_.string(), &skipped), std::vector<std::string>{checkpoint_path(dir_.string(), 7)});
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].path, odd);
  EXPECT_NE(skipped[0].reason.find("64 bits"), std::string::npos) << skipped[0].reason;
  prune_checkpoints(dir_.string(), 1, checkpoint_path(dir_.string(), 7));
  EXPECT_TRUE(fs::exists(odd));
}

// A FIFO named like a checkpoint: never opened for reading (that waits for a writer), listed
// as skipped; a directory of that name likewise.
TEST_F(CheckpointFileTest, OnlyRegularFilesAreRead) {
  write_checkpoint_file(checkpoint_path(dir_.string(), 3), "p");
  const std::string fifo = checkpoint_path(dir_.string(), 9);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directories(checkpoint_path(dir_.string(), 8));
  try {
    read_checkpoint_file(fifo);
    FAIL() << "read a FIFO";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_checkpoint_file(checkpoint_path(dir_.string(), 8)), CheckpointError);
  std::vector<SkippedCheckpoint> skipped;
  EXPECT_EQ(list_checkpoints(dir_.string(), &skipped), std::vector<std::string>{checkpoint_path(dir_.string(), 3)});
  EXPECT_EQ(skipped.size(), 2u);
}

}  // namespace ht
