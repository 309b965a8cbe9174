// The torch::data adapter: every example once per epoch in a seeded order, exact resume from a
// cursor, validation in order, and clear errors for sets that cannot work.
#include <gtest/gtest.h>

#include <set>

#include <torch/torch.h>

#include "hybrid/data/torch_data_source.h"

namespace ht {
namespace {

// Example i: data [2] = {i, -i}, target [] = i % 3.
class Numbers : public torch::data::datasets::Dataset<Numbers> {
 public:
  explicit Numbers(int64_t n, int64_t offset = 0) : n_(n), offset_(offset) {}
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<double>(static_cast<int64_t>(index) + offset_);
    return {torch::tensor({i, -i}), torch::tensor(static_cast<int64_t>(index) % 3)};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_, offset_;
};

}  // namespace

TEST(TorchDataSource, VisitsEveryExampleOncePerEpochInASeededOrder) {
  TorchDataSource<Numbers> source(Numbers(10), Numbers(5, 100), /*batch_size=*/3, /*seed=*/7);
  std::set<int64_t> seen;
  for (int b = 0; b < 3; ++b) {  // 10 / 3: three full batches, the 10th example dropped
    const Batch batch = source.next_train_batch();
    ASSERT_EQ(batch.input.sizes(), (std::vector<int64_t>{3, 2}));
    ASSERT_EQ(batch.target.sizes(), (std::vector<int64_t>{3}));
    for (int64_t r = 0; r < 3; ++r) seen.insert(batch.input[r][0].item<int64_t>());
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(source.cursor().epoch, 1);
  EXPECT_EQ(source.cursor().position, 0);
  TorchDataSource<Numbers> other_seed(Numbers(10), Numbers(5, 100), 3, 8);
  EXPECT_FALSE(torch::equal(TorchDataSource<Numbers>(Numbers(10), Numbers(5), 3, 7).next_train_batch().input,
                            other_seed.next_train_batch().input));
}

TEST(TorchDataSource, ARestoredCursorDrawsTheExactNextBatch) {
  TorchDataSource<Numbers> a(Numbers(20), Numbers(4), 4, 1);
  for (int i = 0; i < 7; ++i) a.next_train_batch();  // into the second epoch
  const DataCursor saved = a.cursor();
  const Batch expected = a.next_train_batch();
  TorchDataSource<Numbers> b(Numbers(20), Numbers(4), 4, 1);
  b.restore(saved);
  EXPECT_TRUE(torch::equal(b.next_train_batch().input, expected.input));
  EXPECT_THROW(b.restore(DataCursor{1, 0, 99}), std::invalid_argument);
}

TEST(TorchDataSource, ValidationIsTheSetInOrderWithAPartialLastBatch) {
  TorchDataSource<Numbers> source(Numbers(8), Numbers(5, 100), 2);
  EXPECT_EQ(source.num_val_batches(), 3);
  EXPECT_EQ(source.val_batch(0).input[1][0].item<int64_t>(), 101);
  EXPECT_EQ(source.val_batch(2).input.size(0), 1);
  EXPECT_THROW(TorchDataSource<Numbers>(Numbers(2), Numbers(2), 3), std::invalid_argument);
}

}  // namespace ht
