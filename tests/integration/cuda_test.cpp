// The device seam on a GPU: a GPT's loss and gradients on CUDA against the CPU's for every
// attention kind, bf16 autocast within tolerance, and the trainer on CUDA training and resuming.
// Each test skips where LibTorch has no CUDA device (CI); scripts/gpu-check.sh runs them on one.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <vector>

#include "hybrid/core/trainer.h"
#include "hybrid/hybrid/nowcast.h"
#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/kernels/optimizers.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/gpt_objective.h"
#include "support/remove_tree.h"

namespace {

// A crash on the GPU machine leaves its stack in the log (the machine is lent for minutes).
void print_stack_and_die(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

#define SKIP_WITHOUT_CUDA()                                                              \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device in this LibTorch/machine"; \
  std::signal(SIGSEGV, print_stack_and_die)

ht::GPTConfig small_gpt(ht::AttentionKind attention) {
  ht::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.block_size = 64;
  c.attention = attention;
  return c;
}

struct LossAndGrads {
  double loss = 0.0;
  std::vector<at::Tensor> grads;  // on the CPU, in parameter order
};

// One forward and backward of a freshly seeded GPT on `device`, on a fixed token batch.
LossAndGrads loss_and_grads(const ht::GPTConfig& config, const c10::Device& device) {
  torch::manual_seed(0);
  ht::GPT gpt(config);
  gpt.to(device);
  auto gen = at::detail::createCPUGenerator(7);
  const at::Tensor seq = torch::randint(config.vocab_size, {4, 33}, gen);  // [B, T+1]
  const at::Tensor idx = seq.narrow(1, 0, 32).contiguous().to(device);     // [B, T]
  const at::Tensor targets = seq.narrow(1, 1, 32).contiguous().to(device);  // [B, T]
  const at::Tensor loss = gpt.loss(idx, targets);
  loss.backward();
  LossAndGrads out;
  out.loss = loss.item<double>();
  for (const auto& p : gpt.parameters()) out.grads.push_back(p.grad().to(torch::kCPU));
  return out;
}

class ImageData : public ht::DataSource {
 public:
  ImageData() {
    auto gen = at::detail::createCPUGenerator(11);
    for (int i = 0; i < 4; ++i)
      batches_.push_back({torch::randn({32, 20}, gen), torch::randint(5, {32}, gen)});  // [B, 20], [B]
  }
  ht::Batch next_train_batch() override { return batches_[static_cast<size_t>(cursor_.position++ % 4)]; }
  ht::DataCursor cursor() const override { return cursor_; }
  void restore(const ht::DataCursor& c) override { cursor_ = c; }
  int64_t num_val_batches() const override { return 1; }
  ht::Batch val_batch(int64_t) const override { return batches_[0]; }
  int64_t items_per_batch() const override { return 32; }

 private:
  std::vector<ht::Batch> batches_;
  ht::DataCursor cursor_;
};

struct CudaRun {
  explicit CudaRun(const std::string& dir, int64_t steps) {
    torch::manual_seed(3);
    net = torch::nn::Sequential(torch::nn::Linear(20, 64), torch::nn::ReLU(), torch::nn::Linear(64, 5));
    net->to(c10::Device("cuda:0"));
    objective = ht::make_objective(net.ptr(), [n = net](const ht::Batch& b) mutable {
      return torch::cross_entropy_loss(n->forward(b.input), b.target);
    });
    optimizer = ht::make_adamw(net->parameters(), ht::AdamWOptions{});
    ht::TrainerOptions o;
    o.max_steps = steps;
    o.device = c10::Device("cuda:0");
    o.checkpoint.dir = dir;
    o.checkpoint.every_steps = 10;
    trainer = std::make_unique<ht::Trainer>(*objective, *optimizer, data, o);
  }
  torch::nn::Sequential net{nullptr};
  std::unique_ptr<ht::Objective> objective;
  std::unique_ptr<ht::Optimizer> optimizer;
  ImageData data;
  std::unique_ptr<ht::Trainer> trainer;
};

// A nowcaster known to be bad: every weight pushed by +3 (the states it reads are host copies).
class PushAway : public ht::NowcastModel {
 public:
  explicit PushAway(ht::NowcastSpec spec) : NowcastModel(std::move(spec)) {}
  std::string name() const override { return "push-away"; }
  int64_t max_horizon() const override { return 40; }

 protected:
  void predict_checked(const std::vector<std::vector<at::Tensor>>& states, int64_t,
                       const std::vector<at::Tensor>& out) override {
    for (size_t i = 0; i < out.size(); ++i) out[i].copy_(states[i][4] + 3.0);
  }
};

// Nowcasting on the GPU: states recorded to host memory every 4 steps, a jump every 20, judged
// 5 steps later on the trend of the 4 states before it, and (always bad) undone.
std::unique_ptr<ht::NowcastStrategy> bad_jumps_judged_late() {
  ht::NowcastStrategyOptions o;
  o.period = 20;
  o.horizon_max = 8;
  o.verify_after = 5;
  o.trend_states = 4;
  o.redo_budget = 0;  // a short run: no limit
  return ht::make_nowcast_strategy(o, [](const ht::NowcastSpec& spec) { return std::make_unique<PushAway>(spec); });
}

}  // namespace

TEST(Cuda, GptLossAndGradientsMatchTheCpuForEveryAttentionKind) {
  SKIP_WITHOUT_CUDA();
  for (const auto kind : {ht::AttentionKind::Naive, ht::AttentionKind::Flash, ht::AttentionKind::Fused}) {
    if (!ht::attention_unavailable_reason(kind).empty()) continue;  // fused before LibTorch 2.0
    const ht::GPTConfig config = small_gpt(kind);
    const LossAndGrads cpu = loss_and_grads(config, torch::kCPU);
    const LossAndGrads gpu = loss_and_grads(config, c10::Device("cuda:0"));
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-4 * cpu.loss) << ht::to_string(kind);
    ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
    for (size_t i = 0; i < cpu.grads.size(); ++i)
      EXPECT_TRUE(torch::allclose(gpu.grads[i], cpu.grads[i], 1e-3, 1e-5))
          << ht::to_string(kind) << " parameter " << i << ": max difference "
          << (gpu.grads[i] - cpu.grads[i]).abs().max().item<double>();
  }
}

TEST(Cuda, Bf16AutocastStaysWithinBf16ToleranceOfFp32) {
  SKIP_WITHOUT_CUDA();
  ht::GPTConfig config = small_gpt(ht::AttentionKind::Naive);
  const LossAndGrads fp32 = loss_and_grads(config, c10::Device("cuda:0"));
  config.precision = ht::Precision::BF16;
  const LossAndGrads bf16 = loss_and_grads(config, c10::Device("cuda:0"));
  EXPECT_NEAR(bf16.loss, fp32.loss, 0.02 * fp32.loss);
  for (size_t i = 0; i < fp32.grads.size(); ++i) {
    EXPECT_EQ(bf16.grads[i].scalar_type(), torch::kFloat) << "gradients of fp32 masters are fp32";
    const double rel = (bf16.grads[i] - fp32.grads[i]).norm().item<double>() /
                       (fp32.grads[i].norm().item<double>() + 1e-12);
    EXPECT_LT(rel, 0.05) << "parameter " << i;
  }
}

TEST(Cuda, TrainerTrainsOnTheGpuAndResumesBitExactly) {
  SKIP_WITHOUT_CUDA();
  const std::string dir = (std::filesystem::temp_directory_path() / "ht_cuda_resume").string();
  ht::testing::remove_tree(dir);
  CudaRun full(dir + "/full", 20);
  const double first = full.trainer->evaluate().val_loss;
  full.trainer->fit();
  EXPECT_LT(full.trainer->evaluate().val_loss, first) << "the loss should drop in 20 AdamW steps";
  for (const auto& p : full.net->parameters()) EXPECT_TRUE(p.is_cuda());

  // The same run stopped at step 10 (its checkpoint) and resumed in a fresh trainer.
  ASSERT_TRUE(std::filesystem::remove(dir + "/full/ckpt-000000020.ht"));
  CudaRun again(dir + "/full", 20);
  ASSERT_FALSE(again.trainer->resume_latest(dir + "/full").empty());
  ASSERT_EQ(again.trainer->step(), 10);
  again.trainer->fit();
  const auto a = full.net->parameters(), b = again.net->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  ht::testing::remove_tree(dir);
}

TEST(Cuda, NowcastUndoesBadJumpsExactlyAndResumesInsideAWindow) {
  SKIP_WITHOUT_CUDA();
  const std::string dir = (std::filesystem::temp_directory_path() / "ht_cuda_nowcast").string();
  ht::testing::remove_tree(dir);
  CudaRun plain(dir + "/plain", 60);
  plain.trainer->fit();
  // Every jump undone: weights, AdamW's moments, cursor and step count back, bit for bit.
  CudaRun undone(dir + "/undone", 60);
  undone.trainer->set_strategy(bad_jumps_judged_late());
  undone.trainer->fit();
  const auto* s = dynamic_cast<const ht::NowcastStrategy*>(undone.trainer->strategy());
  EXPECT_GE(s->summary().undone, 2);
  const auto a = plain.net->parameters(), b = undone.net->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i].is_cuda());
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  }
  // Checkpointed inside the window of the jump at step 20 (judged at 26) and resumed.
  CudaRun first(dir + "/first", 60);
  first.trainer->set_strategy(bad_jumps_judged_late());
  for (int i = 0; i < 23; ++i) first.trainer->train_step();
  ASSERT_FALSE(first.trainer->strategy()->at_verified_point());
  first.trainer->save_checkpoint(dir + "/window.ht");
  CudaRun second(dir + "/second", 60);
  second.trainer->set_strategy(bad_jumps_judged_late());
  second.trainer->load_checkpoint(dir + "/window.ht");
  second.trainer->fit();
  const auto c = second.net->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], c[i])) << "resumed, parameter " << i;
  const auto* r = dynamic_cast<const ht::NowcastStrategy*>(second.trainer->strategy());
  EXPECT_EQ(r->summary().jump_log, s->summary().jump_log);
  ht::testing::remove_tree(dir);
}

TEST(Cuda, WnnPlusOnTheGpuPredictsWhatItPredictsOnTheHost) {
  SKIP_WITHOUT_CUDA();
  // A 2-layer GPT's shapes and kinds (fused q|k|v included), 5 drifting states; small chunks so
  // the per-chunk transfers and the q|k|v column index cross chunk borders.
  ht::GPT gpt(small_gpt(ht::AttentionKind::Naive));
  const ht::NowcastSpec spec = ht::nowcast_spec_gpt2(ht::named_shapes(gpt), 2);
  auto gen = at::detail::createCPUGenerator(3);
  std::vector<std::vector<at::Tensor>> states;
  for (const auto& p : spec.params) {
    const at::Tensor start = at::randn(p.shape, gen), drift = 0.05 * at::randn(p.shape, gen);
    std::vector<at::Tensor> s;
    for (int t = 0; t < ht::kNowcastContext; ++t) s.push_back(start + t * drift + 0.01 * at::randn(p.shape, gen));
    states.push_back(s);
  }
  const std::string weights = std::string(HT_SOURCE_DIR) + "/models/nino/nino_mlp.safetensors";
  ht::NowcastOptions host, gpu;
  host.chunk_rows = gpu.chunk_rows = 1000;
  gpu.device = c10::Device("cuda:0");
  for (const int64_t k : {1, 13, 40}) {
    const auto a = ht::load_wnn_plus(weights, spec, host)->predict(states, k);
    const auto b = ht::load_wnn_plus(weights, spec, gpu)->predict(states, k);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(b[i].is_cpu());
      const double scale = a[i].abs().max().item<double>();
      EXPECT_LE((a[i] - b[i]).abs().max().item<double>(), 1e-5 * scale) << spec.params[i].name << " k " << k;
    }
  }
}
