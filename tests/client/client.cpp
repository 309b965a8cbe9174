// A user's program against the installed hybrid-trainer: a TORCH_MODULE with its own loss and
// metric, trained plainly and in hybrid mode, checkpointed and resumed. Exits 1 on any failed check.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/runtime.h"
#include "hybrid/core/trainer.h"
#include "hybrid/hybrid/strategy.h"
#include "hybrid/kernels/optimizers.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

struct RegressorImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  RegressorImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(2, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }  // [B, 2] -> [B, 1]
};
TORCH_MODULE(Regressor);

// y = sin(2 x0) + x1 / 2 with noise, batches drawn from a generator seeded by the cursor.
class Data : public ht::DataSource {
 public:
  ht::Batch next_train_batch() override {
    const ht::Batch b = make(1000 + cursor_.epoch * 100 + cursor_.position);
    if (++cursor_.position == 100) {
      cursor_.position = 0;
      ++cursor_.epoch;
    }
    return b;
  }
  ht::DataCursor cursor() const override { return cursor_; }
  void restore(const ht::DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 4; }
  ht::Batch val_batch(int64_t i) const override { return make(i); }
  int64_t items_per_batch() const override { return 64; }

 private:
  static ht::Batch make(int64_t seed) {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
    auto x = torch::rand({64, 2}, gen) * 4 - 2;                                      // [B, 2]
    auto y = torch::sin(2 * x.select(1, 0)) + 0.5 * x.select(1, 1);                 // [B]
    return {x, (y + 0.05 * torch::randn({64}, gen)).unsqueeze(1)};                   // [B, 1]
  }
  ht::DataCursor cursor_;
};

struct Run {
  Regressor net;
  std::unique_ptr<ht::Objective> objective;
  std::unique_ptr<ht::Optimizer> optimizer;
  Data data;
  std::unique_ptr<ht::Trainer> trainer;
  explicit Run(ht::TrainerOptions options) {
    torch::manual_seed(3);
    // A loss of the user's own: Huber, via the holder (make_objective takes TORCH_MODULE holders).
    objective = ht::make_objective(net, [n = net](const ht::Batch& b) mutable {
      return torch::smooth_l1_loss(n->forward(b.input), b.target);
    });
    ht::AdamWOptions adamw;
    adamw.lr = 1e-2;
    optimizer = ht::make_adamw(net->parameters(), adamw);
    trainer = std::make_unique<ht::Trainer>(*objective, *optimizer, data, options);
    trainer->add_metric("mae", [n = net](const ht::Batch& b) mutable {
      return (n->forward(b.input) - b.target).abs().mean().item<double>();
    });
  }
};

ht::TrainerOptions options(int64_t steps, const std::string& dir) {
  ht::TrainerOptions o;
  o.max_steps = steps;
  o.eval_every = 50;
  o.schedule.kind = ht::LrSchedule::Kind::Cosine;
  o.schedule.warmup_steps = 10;
  o.checkpoint.dir = dir;
  o.checkpoint.every_steps = 100;
  return o;
}

bool same_weights(Regressor& a, Regressor& b) {
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& kv : pa)
    if (!torch::equal(kv.value(), pb[kv.key()])) return false;
  return true;
}

}  // namespace

int main() {
  // Before the tracking allocator exists, a budget cannot be enforced: that is an error.
  {
    ht::TrainerOptions o = options(10, "");
    o.memory.budget_bytes = int64_t{1} << 30;
    bool refused = false;
    try {
      Run run(o);
    } catch (const ht::OptionsError&) {
      refused = true;
    }
    check(refused, "a memory budget without the tracking allocator is refused");
  }
  ht::install_tracking_allocator();
  ht::set_threads(2);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ht-client-" + std::to_string(::getpid()));
  fs::remove_all(dir);

  // Plain: the loss falls and the metric is reported at every evaluation.
  Run plain(options(300, (dir / "plain").string()));
  const double first = plain.trainer->evaluate().val_loss;
  const ht::EvalRecord last = plain.trainer->fit();
  check(last.val_loss < 0.5 * first, "plain training lowers the validation loss (" + std::to_string(first) +
                                         " -> " + std::to_string(last.val_loss) + ")");
  check(plain.trainer->evaluations().size() == 6 && last.metrics.count("mae") == 1,
        "six evaluations, each with the user's metric");

  // Resume: 200 steps from the step-100 checkpoint give the straight run's weights bit for bit.
  Run resumed(options(300, (dir / "plain").string()));
  resumed.trainer->load_checkpoint(ht::checkpoint_path((dir / "plain").string(), 100));
  resumed.trainer->fit();
  check(same_weights(plain.net, resumed.net), "a run resumed at step 100 ends with the same weights");
  check(resumed.trainer->evaluations().size() == 6, "the resumed run keeps the evaluations before the checkpoint");

  // Hybrid: the engine's summary is read through the typed pointer the factory returns.
  Run hybrid(options(300, (dir / "hybrid").string()));
  ht::HybridOptions h;
  h.warmup_steps = 20;
  h.full_steps = 32;
  auto strategy = ht::make_hybrid_strategy(h);
  const ht::HybridStrategy* engine = strategy.get();
  hybrid.trainer->set_strategy(std::move(strategy));
  const ht::EvalRecord hybrid_last = hybrid.trainer->fit();
  check(engine->summary().steps == 300, "the hybrid summary counts the run's 300 steps");
  check(hybrid_last.val_loss < 0.5 * first, "hybrid training lowers the validation loss too");

  fs::remove_all(dir);
  std::printf("%s\n", failures == 0 ? "client: all checks passed" : "client: checks FAILED");
  return failures == 0 ? 0 : 1;
}
