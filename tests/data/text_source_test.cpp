// TextSource tests on a small random-letter corpus where every 17-byte window occurs once, so a
// batch row can be located in the corpus: shifts, window placement, held-out tail, cursor restore.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "hybrid/data/byte_codec.h"
#include "hybrid/data/text_source.h"

namespace ht {
namespace {

constexpr int64_t kB = 4, kT = 16;

std::string random_letters(size_t n) {
  std::string s(n, ' ');
  uint64_t x = 12345;
  for (auto& c : s) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>('a' + (x >> 33) % 26);
  }
  return s;
}

const std::string& text() {
  static const std::string t = random_letters(10000);  // 9000 train tokens, 1000 held out
  return t;
}

// Where the T+1 tokens of batch row i (input then the last target) sit in the corpus.
int64_t locate(const Batch& b, int64_t i) {
  const std::string window = decode_bytes(b.input[i]) + decode_bytes(b.target[i][kT - 1]);
  const size_t at = text().find(window);
  EXPECT_NE(at, std::string::npos) << "row " << i << " is not a substring of the corpus";
  EXPECT_EQ(text().find(window, at + 1), std::string::npos) << "window occurs twice; test corpus too regular";
  return static_cast<int64_t>(at);
}

// Batches 0..n-1 of a held-out span hold its windows in order from `start`, B a batch, the last
// batch last_rows.
void expect_windows_in_order(int64_t n, const std::function<Batch(int64_t)>& batch, int64_t start, int64_t last_rows) {
  for (int64_t i = 0; i < n; ++i) {
    const Batch b = batch(i);
    ASSERT_EQ(b.input.size(0), i < n - 1 ? kB : last_rows) << "batch " << i;
    for (int64_t r = 0; r < b.input.size(0); ++r) {
      EXPECT_EQ(locate(b, r), start);
      start += kT + 1;
    }
  }
}

TextSource source(uint64_t seed, int64_t max_val_batches = 0) {
  return TextSource(TokenCorpus::from_bytes(text()), kB, kT, seed, 0.1, max_val_batches);
}

TEST(TextSource, TargetsAreInputsShiftedByOne) {
  TextSource s = source(1);
  EXPECT_EQ(s.items_per_batch(), kB * kT);
  EXPECT_STREQ(s.item_name(), "tokens");
  EXPECT_EQ(s.vocab_size(), 256);
  Batch b = s.next_train_batch();
  ASSERT_EQ(b.input.sizes(), (std::vector<int64_t>{kB, kT}));
  ASSERT_EQ(b.target.sizes(), (std::vector<int64_t>{kB, kT}));
  EXPECT_EQ(b.input.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(b.input.slice(1, 1), b.target.slice(1, 0, kT - 1)));
  for (int64_t i = 0; i < kB; ++i) {
    const int64_t at = locate(b, i);
    EXPECT_TRUE(torch::equal(b.target[i], TokenCorpus::from_bytes(text()).slice(at + 1, kT)));
  }
}

TEST(TextSource, AnEpochServesDistinctAlignedWindowsFromTheTrainingSpan) {
  TextSource s = source(5);
  ASSERT_EQ(s.num_train_tokens(), 9000);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const int64_t batches = s.batches_in_epoch(epoch);
    std::set<int64_t> starts;
    for (int64_t i = 0; i < batches; ++i) {
      Batch b = s.next_train_batch();
      for (int64_t r = 0; r < kB; ++r) starts.insert(locate(b, r));
    }
    ASSERT_EQ(static_cast<int64_t>(starts.size()), batches * kB) << "a window repeated within epoch " << epoch;
    const int64_t phase = *starts.begin() % (kT + 1);
    for (int64_t at : starts) {
      EXPECT_EQ(at % (kT + 1), phase) << "windows overlap";
      EXPECT_LE(at + kT + 1, 9000) << "training window reaches into the held-out tail";
    }
    // Drop-last: fewer than B windows of this phase were left unserved.
    EXPECT_LT((9000 - phase) / (kT + 1) - batches * kB, kB);
    EXPECT_EQ(s.cursor().epoch, epoch);
  }
}

TEST(TextSource, SeedsAndEpochsGiveDifferentOrders) {
  TextSource a = source(9), b = source(9), c = source(10);
  const Batch a0 = a.next_train_batch();
  EXPECT_TRUE(torch::equal(a0.input, b.next_train_batch().input));
  EXPECT_FALSE(torch::equal(a0.input, c.next_train_batch().input));
  a.restore({9, 1, 0});
  EXPECT_FALSE(torch::equal(a0.input, a.next_train_batch().input));
}

TEST(TextSource, CursorRestoreReproducesAcrossEpochs) {
  TextSource original = source(21);
  const int64_t steps = original.batches_in_epoch(0) + original.batches_in_epoch(1) + 5;
  for (int64_t step = 0; step < steps; ++step) {
    const DataCursor saved = original.cursor();
    const Batch expected = original.next_train_batch();
    if (step % 13 != 0 && saved.position != 0) continue;  // sample steps, always test epoch starts
    TextSource resumed = source(0);
    resumed.restore(saved);
    const Batch got = resumed.next_train_batch();
    ASSERT_TRUE(torch::equal(got.input, expected.input)) << "step " << step;
    ASSERT_TRUE(torch::equal(got.target, expected.target)) << "step " << step;
    ASSERT_EQ(resumed.cursor(), original.cursor());
  }
  EXPECT_EQ(original.cursor().epoch, 2);
  // A cursor at the very end of an epoch rolls over to the next one.
  TextSource end = source(21);
  end.restore({21, 0, end.batches_in_epoch(0)});
  TextSource next = source(21);
  next.restore({21, 1, 0});
  EXPECT_TRUE(torch::equal(end.next_train_batch().input, next.next_train_batch().input));
  EXPECT_THROW(end.restore({21, 0, end.batches_in_epoch(0) + 1}), std::invalid_argument);
}

TEST(TextSource, ValidationWindowsComeInOrderFromTheHeldOutTail) {
  TextSource s = source(3);
  // 1000 held-out tokens make 58 windows of 17: 14 batches of 4 and one of 2.
  ASSERT_EQ(s.num_val_batches(), 15);
  expect_windows_in_order(s.num_val_batches(), [&](int64_t i) { return s.val_batch(i); }, 9000, 2);
  EXPECT_TRUE(torch::equal(s.val_batch(2).input, source(77).val_batch(2).input));  // seed-independent
  EXPECT_EQ(source(3, 4).num_val_batches(), 4);
  EXPECT_THROW(s.val_batch(15), std::out_of_range);
}

TEST(TextSource, TheProbeSplitSitsBetweenTrainingAndValidation) {
  // 10000 tokens: 1000 validate (the tail), the 500 before them are the probe split, 8500 train.
  TextSource s(TokenCorpus::from_bytes(text()), kB, kT, 5, 0.1, 0, 0.05);
  EXPECT_EQ(s.num_train_tokens(), 8500);
  EXPECT_EQ(s.num_probe_tokens(), 500);
  EXPECT_EQ(s.num_val_tokens(), 1000);
  // 500 tokens make 29 windows of 17: 7 batches of 4 and one of 1.
  ASSERT_EQ(s.num_probe_batches(), 8);
  expect_windows_in_order(s.num_probe_batches(), [&](int64_t i) { return s.probe_batch(i); }, 8500, 1);
  EXPECT_EQ(locate(s.val_batch(0), 0), 9000);  // validation unchanged by the probe split
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t i = s.batches_in_epoch(epoch); i > 0; --i) {
      const Batch b = s.next_train_batch();
      for (int64_t r = 0; r < kB; ++r) ASSERT_LE(locate(b, r) + kT + 1, 8500) << "training window in the probe split";
    }
  }
  EXPECT_EQ(source(1).num_probe_batches(), 0);
  EXPECT_THROW(source(1).probe_batch(0), std::out_of_range);
  EXPECT_THROW(TextSource(TokenCorpus::from_bytes(text()), kB, kT, 5, 0.5, 0, 0.5), std::invalid_argument);
  EXPECT_THROW(TextSource(TokenCorpus::from_bytes(text()), kB, kT, 5, 0.1, 0, 0.001), std::invalid_argument);  // 10 tokens
}

TEST(TextSource, Uint16CorpusKeepsLargeIds) {
  std::vector<uint16_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(50000 + i % 257);
  TextSource s(TokenCorpus::from_tokens(ids, 50257), 2, 8, 0);
  EXPECT_EQ(s.vocab_size(), 50257);
  const Batch b = s.next_train_batch();
  EXPECT_GE(b.input.min().item<int64_t>(), 50000);
  EXPECT_LE(b.input.max().item<int64_t>(), 50256);
  // Consecutive ids in this corpus differ by one (mod 257), so the shift shows in the values.
  EXPECT_TRUE(torch::equal((b.input - 50000 + 1).remainder(257), b.target - 50000));
}

TEST(TextSource, TooShortCorporaSayHowLongAndWhatTIs) {
  try {
    TextSource(TokenCorpus::from_bytes("0123456789", "tiny"), 1, 16, 0);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("has 10 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("T=16"), std::string::npos) << m;
  }
  const std::string t = random_letters(200);
  EXPECT_THROW(TextSource(TokenCorpus::from_bytes(t), 16, 16, 0), std::invalid_argument);  // no full batch
  EXPECT_THROW(TextSource(TokenCorpus::from_bytes(t), 1, 16, 0, 0.05), std::invalid_argument);  // 10 held out < 17
  TextSource no_val(TokenCorpus::from_bytes(t), 1, 16, 0, 0.0);
  EXPECT_EQ(no_val.num_val_batches(), 0);
  EXPECT_EQ(no_val.num_train_tokens(), 200);
}

}  // namespace
}  // namespace ht
