// The checkpoint registry and reader: parts saved and loaded by their owners, files of another
// kind refused before anything changes, and every way a file can be unreadable a CheckpointError.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "hybrid/core/checkpoint.h"
#include "hybrid/core/checkpoint_file.h"
#include "support/scratch_dir.h"
#include "support/toy_problem.h"

namespace ht {
namespace {

using testing::ToyNet;

// A part owned by a test: an int it saves and restores.
CheckpointPart counter_part(const std::string& name, int64_t& value, std::function<void()> when_missing = {}) {
  CheckpointPart p;
  p.name = name;
  p.what = "counter " + name;
  p.save = [&value](torch::serialize::OutputArchive& a) { a.write("value", torch::tensor(value)); };
  p.load = [&value](torch::serialize::InputArchive& a) {
    at::Tensor t;
    a.read("value", t);
    value = t.item<int64_t>();
  };
  p.when_missing = std::move(when_missing);
  return p;
}

void write_archive(const std::string& path, const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive root;
  fill(root);
  std::string payload;
  root.save_to([&](const void* data, size_t n) {
    payload.append(static_cast<const char*>(data), n);
    return n;
  });
  write_checkpoint_file(path, payload);
}

}  // namespace

TEST(CheckpointRegistry, APartRegistersItsOwnSaveAndLoad) {
  const testing::ScratchDir dir;
  int64_t a = 7, b = 11;
  CheckpointRegistry saving;
  saving.add(counter_part("a", a));
  saving.add(counter_part("b", b));
  saving.save(dir.file("c.ht"), 42, "config text");

  int64_t a2 = 0, b2 = 0;
  CheckpointRegistry loading;
  loading.add(counter_part("a", a2));
  loading.add(counter_part("b", b2));
  const CheckpointReader file(dir.file("c.ht"));
  EXPECT_EQ(file.step(), 42);
  EXPECT_EQ(file.config_text(), "config text");
  EXPECT_EQ(file.parts(), (std::vector<std::string>{"a", "b"}));
  loading.load(file);
  EXPECT_EQ(a2, 7);
  EXPECT_EQ(b2, 11);
  EXPECT_THROW(loading.add(counter_part("a", a2)), std::invalid_argument);
}

TEST(CheckpointRegistry, APartTheFileLacksIsAMismatchUnlessItSaysHowToStartOver) {
  const testing::ScratchDir dir;
  int64_t a = 1;
  CheckpointRegistry saving;
  saving.add(counter_part("a", a));
  saving.save(dir.file("c.ht"), 1, "");

  int64_t a2 = 0, extra = 5;
  bool started_over = false;
  CheckpointRegistry optional_extra;
  optional_extra.add(counter_part("a", a2));
  optional_extra.add(counter_part("extra", extra, [&] { started_over = true; }));
  optional_extra.load(CheckpointReader(dir.file("c.ht")));
  EXPECT_TRUE(started_over);
  EXPECT_EQ(a2, 1);

  CheckpointRegistry required_extra;
  required_extra.add(counter_part("a", a2));
  required_extra.add(counter_part("extra", extra));
  try {
    required_extra.load(CheckpointReader(dir.file("c.ht")));
    FAIL();
  } catch (const CheckpointMismatch& e) {
    EXPECT_EQ(e.part, "extra");
  }
}

TEST(CheckpointRegistry, APartThisRunDoesNotHaveIsAMismatchAndNothingLoads) {
  const testing::ScratchDir dir;
  int64_t a = 3, s = 9;
  CheckpointRegistry saving;
  saving.add(counter_part("a", a));
  saving.add(counter_part("strategy", s));
  saving.save(dir.file("c.ht"), 1, "");

  int64_t a2 = 0;
  CheckpointRegistry plain;
  plain.add(counter_part("a", a2));
  try {
    plain.load(CheckpointReader(dir.file("c.ht")));
    FAIL() << "a part this run has no use for was dropped silently";
  } catch (const CheckpointMismatch& e) {
    EXPECT_EQ(e.part, "strategy");
  }
  EXPECT_EQ(a2, 0) << "refused before anything loaded";
}

TEST(CheckpointModelPart, EveryTensorOfTheFileMustBelongToTheModel) {
  const testing::ScratchDir dir;
  torch::manual_seed(1);
  auto wide = std::make_shared<ToyNet>(64);
  auto narrow = std::make_shared<ToyNet>(32);
  // A model with a layer fewer: its tensors are a subset of the file's.
  struct OneLayer : torch::nn::Module {
    torch::nn::Linear fc1{nullptr};
    OneLayer() { fc1 = register_module("fc1", torch::nn::Linear(2, 32)); }
  };
  auto one_layer = std::make_shared<OneLayer>();
  CheckpointRegistry saving;
  saving.add(model_part(*narrow));
  saving.save(dir.file("narrow.ht"), 1, "");

  const at::Tensor before = one_layer->fc1->weight.clone();
  CheckpointRegistry smaller;
  smaller.add(model_part(*one_layer));
  try {
    smaller.load(CheckpointReader(dir.file("narrow.ht")));
    FAIL() << "a checkpoint with tensors the model lacks was loaded";
  } catch (const CheckpointMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("fc2"), std::string::npos) << e.what();
    EXPECT_EQ(e.part, "model");
  }
  EXPECT_TRUE(torch::equal(before, one_layer->fc1->weight));

  CheckpointRegistry other_shape;
  other_shape.add(model_part(*wide));
  EXPECT_THROW(other_shape.load(CheckpointReader(dir.file("narrow.ht"))), CheckpointMismatch);

  auto same = std::make_shared<ToyNet>(32);
  CheckpointRegistry fits;
  fits.add(model_part(*same));
  fits.load(CheckpointReader(dir.file("narrow.ht")));
  EXPECT_TRUE(torch::equal(same->fc2->weight, narrow->fc2->weight));
}

TEST(CheckpointReader, AnArchiveThatDoesNotParseBehindAValidChecksumIsACheckpointError) {
  const testing::ScratchDir dir;
  write_checkpoint_file(dir.file("garbage.ht"), std::string(4096, 'x'));  // CRC fine, archive not
  try {
    CheckpointReader file(dir.file("garbage.ht"));
    FAIL();
  } catch (const CheckpointMismatch& e) {
    FAIL() << "a damaged file is not a mismatch (resume would not fall back): " << e.what();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum is intact"), std::string::npos) << e.what();
  }
}

TEST(CheckpointReader, AnOlderLayoutIsRefusedWithWhatToDo) {
  const testing::ScratchDir dir;
  write_archive(dir.file("v1.ht"), [](torch::serialize::OutputArchive& root) {
    root.write("format_version", torch::tensor(int64_t{1}));
    root.write("step", torch::tensor(int64_t{5}));
  });
  try {
    CheckpointReader file(dir.file("v1.ht"));
    FAIL();
  } catch (const CheckpointMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("layout version 1"), std::string::npos) << e.what();
  }
}

TEST(CheckpointReader, APartListNamingAMissingPartIsACheckpointError) {
  const testing::ScratchDir dir;
  write_archive(dir.file("torn.ht"), [](torch::serialize::OutputArchive& root) {
    root.write("format_version", torch::tensor(kCheckpointFormat));
    root.write("step", torch::tensor(int64_t{5}));
    root.write("config", c10::IValue(std::string("")));
    root.write("parts", c10::IValue(std::string("model,optimizer")));
  });
  EXPECT_THROW(CheckpointReader(dir.file("torn.ht")), CheckpointError);
}

}  // namespace ht
