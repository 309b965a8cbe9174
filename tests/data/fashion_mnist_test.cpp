// Fashion-MNIST tests on the real Debian data set (skipped if dataset-fashion-mnist is absent):
// sizes, labels, normalisation, seeded shuffling, epoch coverage, bit-exact cursor restore.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <set>
#include <vector>

#include "support/scratch_dir.h"
#include "hybrid/data/fashion_mnist.h"

namespace ht {
namespace {

// Loaded once per test binary: held here so the loader's weak cache keeps it alive.
std::shared_ptr<const FashionMnist> real_data() {
  static const std::shared_ptr<const FashionMnist> data =
      std::filesystem::exists(kFashionMnistDir) ? load_fashion_mnist() : nullptr;
  return data;
}

#define REQUIRE_FASHION_MNIST()                                                              \
  if (!real_data()) GTEST_SKIP() << kFashionMnistDir << " missing (apt-get install dataset-fashion-mnist)"

// The real images with labels replaced by their own index, so a batch says which samples it holds.
std::shared_ptr<const FashionMnist> indexed_data() {
  auto data = std::make_shared<FashionMnist>(*real_data());
  data->train.labels = torch::arange(data->train.size(), torch::kInt64);
  return data;
}

TEST(FashionMnist, SizesLabelsAndBalance) {
  REQUIRE_FASHION_MNIST();
  const FashionMnist& d = *real_data();
  EXPECT_EQ(d.train.images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(d.test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(d.train.labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(d.train.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(d.train.labels.max().item<int64_t>(), 9);
  // Fashion-MNIST is exactly balanced: 6000 / 1000 images per class.
  EXPECT_TRUE(torch::equal(torch::bincount(d.train.labels), torch::full({10}, 6000, torch::kInt64)));
  EXPECT_TRUE(torch::equal(torch::bincount(d.test.labels), torch::full({10}, 1000, torch::kInt64)));
}

TEST(FashionMnist, LoaderSharesOneCopy) {
  REQUIRE_FASHION_MNIST();
  EXPECT_EQ(load_fashion_mnist().get(), real_data().get());
  EXPECT_EQ(load_fashion_mnist(std::string(kFashionMnistDir) + "/").get(), real_data().get());
}

TEST(FashionMnist, NormalisedTrainingSetHasZeroMeanUnitStd) {
  REQUIRE_FASHION_MNIST();
  at::Tensor x = normalize_fashion_mnist(real_data()->train.images);  // [60000, 1, 28, 28]
  EXPECT_EQ(x.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 2e-3);
  EXPECT_NEAR(x.std().item<double>(), 1.0, 2e-3);
}

TEST(FashionMnist, BatchShapesAndDefaultValidationIsTheTestSet) {
  REQUIRE_FASHION_MNIST();
  FashionMnistSource source(real_data(), 64, 1);
  EXPECT_EQ(source.num_train(), 60000);
  EXPECT_EQ(source.batches_per_epoch(), 937);  // 60000 / 64, partial batch dropped
  EXPECT_EQ(source.items_per_batch(), 64);
  EXPECT_STREQ(source.item_name(), "samples");

  Batch b = source.next_train_batch();
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{64, 1, 28, 28}));
  EXPECT_EQ(b.input.scalar_type(), torch::kFloat32);
  EXPECT_EQ(b.target.sizes(), (std::vector<int64_t>{64}));
  EXPECT_EQ(b.target.scalar_type(), torch::kInt64);

  EXPECT_EQ(source.num_val(), 10000);
  EXPECT_EQ(source.num_val_batches(), 157);  // 156 full + one of 16
  const FashionMnist& d = *real_data();
  Batch first = source.val_batch(0);
  EXPECT_TRUE(torch::equal(first.target, d.test.labels.narrow(0, 0, 64)));
  EXPECT_TRUE(torch::equal(first.input, normalize_fashion_mnist(d.test.images.narrow(0, 0, 64))));
  Batch last = source.val_batch(156);
  EXPECT_EQ(last.target.size(0), 16);
  EXPECT_TRUE(torch::equal(last.target, d.test.labels.narrow(0, 9984, 16)));
  EXPECT_TRUE(torch::equal(source.val_batch(3).input, source.val_batch(3).input));
  EXPECT_THROW(source.val_batch(157), std::out_of_range);
}

TEST(FashionMnist, HoldoutValidationComesFromTheTrainTail) {
  REQUIRE_FASHION_MNIST();
  FashionMnistSource source(indexed_data(), 100, 3, FashionMnistSplit{5000, 7});
  EXPECT_EQ(source.num_train(), 55000);
  EXPECT_EQ(source.num_val(), 5000);
  EXPECT_EQ(source.num_val_batches(), 7);  // capped from 50
  EXPECT_TRUE(torch::equal(source.val_batch(0).target, torch::arange(55000, 55100, torch::kInt64)));
  EXPECT_TRUE(torch::equal(source.val_batch(6).target, torch::arange(55600, 55700, torch::kInt64)));
  for (int i = 0; i < source.batches_per_epoch(); ++i) {
    ASSERT_LT(source.next_train_batch().target.max().item<int64_t>(), 55000) << "held-out image in training";
  }
}

TEST(FashionMnist, TheProbeSplitIsHeldOutOfTrainingAndValidation) {
  REQUIRE_FASHION_MNIST();
  // Probe images just before the validation holdout; neither is ever trained on.
  FashionMnistSplit split{5000, 0, 2100};
  FashionMnistSource source(indexed_data(), 100, 3, split);
  EXPECT_EQ(source.num_train(), 52900);
  EXPECT_EQ(source.num_probe(), 2100);
  EXPECT_EQ(source.num_probe_batches(), 21);
  EXPECT_TRUE(torch::equal(source.probe_batch(0).target, torch::arange(52900, 53000, torch::kInt64)));
  EXPECT_TRUE(torch::equal(source.probe_batch(20).target, torch::arange(54900, 55000, torch::kInt64)));
  EXPECT_TRUE(torch::equal(source.val_batch(0).target, torch::arange(55000, 55100, torch::kInt64)));
  EXPECT_TRUE(torch::equal(source.probe_batch(3).input,
                           normalize_fashion_mnist(real_data()->train.images.narrow(0, 53200, 100))));
  const DataCursor before = source.cursor();
  source.probe_batch(1);
  EXPECT_EQ(source.cursor(), before);  // probes do not move the training stream
  for (int i = 0; i < source.batches_per_epoch(); ++i) {
    ASSERT_LT(source.next_train_batch().target.max().item<int64_t>(), 52900) << "probe image in training";
  }
  EXPECT_THROW(source.probe_batch(21), std::out_of_range);
  // Without a validation holdout the probe images are the training file's last; the test set validates.
  FashionMnistSource tail(indexed_data(), 128, 3, FashionMnistSplit{0, 0, 2048});
  EXPECT_EQ(tail.num_train(), 57952);
  EXPECT_EQ(tail.num_val(), 10000);
  EXPECT_TRUE(torch::equal(tail.probe_batch(15).target, torch::arange(59872, 60000, torch::kInt64)));
  // No split: no probe batches, and asking for one says so.
  FashionMnistSource none(indexed_data(), 100, 3);
  EXPECT_EQ(none.num_probe_batches(), 0);
  try {
    none.probe_batch(0);
    ADD_FAILURE() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("no probe split"), std::string::npos) << e.what();
  }
  EXPECT_THROW(FashionMnistSource(indexed_data(), 100, 3, FashionMnistSplit{5000, 0, 55000}), std::invalid_argument);
  EXPECT_THROW(FashionMnistSource(indexed_data(), 100, 3, FashionMnistSplit{0, 0, -1}), std::invalid_argument);
}

TEST(FashionMnist, EachEpochCoversEveryImageOnceWithItsOwnPixels) {
  REQUIRE_FASHION_MNIST();
  const FashionMnist& d = *real_data();
  FashionMnistSource source(indexed_data(), 500, 11);
  ASSERT_EQ(source.batches_per_epoch(), 120);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<at::Tensor> seen;
    for (int i = 0; i < 120; ++i) {
      Batch b = source.next_train_batch();
      // Images stay paired with their samples: the pixels are those of the indexed image.
      if (i % 40 == 0) {
        ASSERT_TRUE(torch::equal(b.input, normalize_fashion_mnist(d.train.images.index_select(0, b.target))));
      }
      seen.push_back(b.target);
    }
    at::Tensor all = std::get<0>(torch::sort(torch::cat(seen)));
    EXPECT_TRUE(torch::equal(all, torch::arange(60000, torch::kInt64))) << "epoch " << epoch;
    EXPECT_EQ(source.cursor().epoch, epoch);
  }
}

TEST(FashionMnist, ShuffleIsSeededAndChangesEachEpoch) {
  REQUIRE_FASHION_MNIST();
  auto data = indexed_data();
  FashionMnistSource a(data, 1000, 42), b(data, 1000, 42), other_seed(data, 1000, 43);
  const at::Tensor a0 = a.next_train_batch().target;
  EXPECT_TRUE(torch::equal(a0, b.next_train_batch().target));
  EXPECT_FALSE(torch::equal(a0, other_seed.next_train_batch().target));
  EXPECT_FALSE(torch::equal(a0, torch::arange(1000, torch::kInt64)));  // actually shuffled

  a.restore({42, 1, 0});
  EXPECT_FALSE(torch::equal(a0, a.next_train_batch().target)) << "epoch 1 repeats epoch 0's order";
}

TEST(FashionMnist, CursorRestoreGivesTheIdenticalNextBatch) {
  REQUIRE_FASHION_MNIST();
  // A 1000-image training set (59000 held out) gives 4 batches of 250 per epoch: quick to cross epochs.
  const FashionMnistSplit split{59000, 0};
  FashionMnistSource original(real_data(), 250, 7, split);
  ASSERT_EQ(original.batches_per_epoch(), 4);
  for (int step = 0; step < 11; ++step) {
    const DataCursor saved = original.cursor();
    const Batch expected = original.next_train_batch();
    FashionMnistSource resumed(real_data(), 250, 999, split);  // the cursor's seed wins
    resumed.restore(saved);
    const Batch got = resumed.next_train_batch();
    ASSERT_TRUE(torch::equal(got.input, expected.input)) << "step " << step;
    ASSERT_TRUE(torch::equal(got.target, expected.target)) << "step " << step;
    ASSERT_EQ(resumed.cursor(), original.cursor()) << "step " << step;
  }
  EXPECT_EQ(original.cursor(), (DataCursor{7, 2, 3}));  // 11 batches = 2 epochs of 4 + 3
  EXPECT_THROW(original.restore({7, 0, 5}), std::invalid_argument);
}

TEST(FashionMnist, MissingDirectoryNamesPathAndPackage) {
  testing::ScratchDir dir;
  const std::string absent = dir.file("nowhere");
  try {
    load_fashion_mnist(absent);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(absent), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("apt-get install dataset-fashion-mnist"), std::string::npos) << e.what();
  }
  try {
    load_fashion_mnist(dir.str());  // the directory exists, the files do not
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("train-images-idx3-ubyte.gz")), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ht
