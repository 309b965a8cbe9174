// Real models on real data, short runs: the tiny GPT on the KJV Bible must get well below the
// text's unigram entropy, and the Fashion-MNIST MLP must pass 85 % test accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <torch/torch.h>

#include "hybrid/core/trainer.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/data/fashion_mnist.h"
#include "hybrid/data/kjv.h"
#include "hybrid/data/text_source.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"
#include "hybrid/models/image_classifier.h"

namespace ht {
namespace {

// Entropy of the byte distribution in nats: what a model that ignores context can reach.
double unigram_entropy(const TokenCorpus& corpus) {
  std::vector<double> counts(256, 0.0);
  for (int64_t i = 0; i < corpus.size(); ++i) counts[corpus[i]] += 1.0;
  double h = 0.0;
  for (double c : counts)
    if (c > 0) h -= c / corpus.size() * std::log(c / corpus.size());
  return h;
}

// Warmup then cosine decay over the run; the rate itself is the optimizer's.
TrainerOptions short_run(int64_t steps, int64_t warmup) {
  TrainerOptions o;
  o.max_steps = steps;
  o.schedule.kind = LrSchedule::Kind::Cosine;
  o.schedule.warmup_steps = warmup;
  o.schedule.total_steps = steps;
  return o;
}

}  // namespace

TEST(EndToEnd, TinyGptOnKjvBeatsTheUnigramEntropy) {
  if (std::system("command -v bible >/dev/null 2>&1") != 0) GTEST_SKIP() << "bible-kjv not installed";
  TokenCorpus corpus = load_kjv();
  const double entropy = unigram_entropy(corpus);  // 3.02 nats (4.36 bits) per byte
  TextSource data(corpus, /*batch=*/16, /*context=*/128, /*seed=*/1, 0.1, /*max_val_batches=*/20);
  torch::manual_seed(1);
  auto gpt = std::make_shared<GPT>(gpt_preset("tiny"));
  auto objective = make_gpt_objective(gpt);
  AdamWOptions a;
  a.lr = 3e-3;
  a.beta2 = 0.95;
  a.weight_decay = 0.1;
  auto optimizer = make_adamw(gpt->parameters(), a);
  Trainer trainer(*objective, *optimizer, data, short_run(300, 30));
  const double initial = trainer.evaluate().val_loss;
  const double final_loss = trainer.fit().val_loss;
  EXPECT_NEAR(initial, std::log(256.0), 0.3);
  // Stated target: 300 steps (~30 s on 2 idle cores) reach below 2.35 nats, more than 0.6 nats
  // under the unigram entropy (3.02). Measured: 2.21.
  EXPECT_LT(final_loss, 2.35) << "unigram entropy " << entropy;
  EXPECT_LT(final_loss, entropy - 0.6);
}

TEST(EndToEnd, MlpOnFashionMnistReaches85PercentTestAccuracy) {
  std::shared_ptr<const FashionMnist> fm;
  try {
    fm = load_fashion_mnist();
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  FashionMnistSource data(fm, /*batch=*/128, /*seed=*/1);
  torch::manual_seed(1);
  auto mlp = make_image_classifier("mlp");
  auto objective = make_image_classifier_objective(mlp);
  AdamWOptions a;
  a.lr = 2e-3;
  a.weight_decay = 0.01;
  auto optimizer = make_adamw(mlp->parameters(), a);
  Trainer trainer(*objective, *optimizer, data, short_run(/*one epoch*/ 468, 50));
  const EvalRecord r = trainer.fit();
  EXPECT_EQ(r.items, 10000);  // the whole t10k test set
  EXPECT_GE(r.accuracy, 0.85) << "val loss " << r.val_loss;
}

}  // namespace ht
