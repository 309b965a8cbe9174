// A check for a machine with a GPU and an upstream CUDA LibTorch (scripts/device_check_dist.sh
// builds it there): the dist layer's NCCL path on CUDA tensors, and its Gloo path on 2.x headers.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "hybrid/dist/data_parallel.h"
#include "hybrid/dist/process_group.h"
#include "hybrid/kernels/optimizers.h"

using namespace ht;

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Batches of a fixed regression problem on `device`.
class Data final : public DataSource {
 public:
  explicit Data(c10::Device d) : d_(d) {}
  Batch next_train_batch() override {
    auto x = torch::linspace(-1, 1, 64, torch::TensorOptions(d_)).view({16, 4}) * (1 + c_.position++ % 3);
    return {x, x.sum(1, true)};
  }
  DataCursor cursor() const override { return c_; }
  void restore(const DataCursor& c) override { c_ = c; }
  int64_t num_val_batches() const override { return 0; }
  Batch val_batch(int64_t) const override { return {}; }
  int64_t items_per_batch() const override { return 16; }

 private:
  c10::Device d_;
  DataCursor c_;
};

// One rank: collectives, then a step through the data-parallel hooks (buckets of 64 bytes).
int rank_main(const std::string& backend, c10::Device device, int rank, int world) {
  dist::ProcessGroupOptions o;
  o.env = dist::environment_from_env();
  o.backend = backend;
  o.timeout_seconds = 30;
  auto g = dist::ProcessGroup::create(o);
  const std::string tag = backend + " rank " + std::to_string(rank) + "/" + std::to_string(world) + " " + device.str();
  auto opts = torch::TensorOptions(device);
  std::vector<at::Tensor> t{torch::full({1000}, float(rank + 1), opts)};
  g->allreduce_sum(t);
  check(t[0][999].item<float>() == world * (world + 1) / 2.0f, tag + ": allreduce sum");
  std::vector<at::Tensor> m{torch::full({3}, float(rank), opts)};
  g->allreduce_max(m);
  check(m[0][0].item<float>() == world - 1, tag + ": allreduce max");
  std::vector<at::Tensor> b{torch::full({5}, float(rank + 7), opts)};
  g->broadcast(b, 0);
  check(b[0][4].item<float>() == 7.0f, tag + ": broadcast");
  const auto all = g->all_gather(torch::full({2}, float(rank), opts));
  check(static_cast<int>(all.size()) == world && all.back()[0].item<float>() == world - 1, tag + ": all-gather");
  g->barrier();

  torch::manual_seed(1);
  auto net = torch::nn::Linear(4, 1);
  net->to(device);
  auto opt = make_adamw(net->parameters(), AdamWOptions{});
  dist::ShardedData data(std::make_unique<Data>(device), rank, world);
  dist::DataParallelOptions d;
  d.bucket_bytes = 64;
  d.first_bucket_bytes = 8;
  auto dp = dist::make_data_parallel(*g, *net.ptr(), *opt, data, d);
  const Batch batch = data.next_train_batch();
  dp->before_backward(true);
  auto loss = torch::mse_loss(net->forward(batch.input), batch.target);
  loss.backward();
  const double global = dp->finish_backward(loss.item<double>());
  check(std::isfinite(global), tag + ": a step through the gradient buckets, loss " + std::to_string(global));
  check(net->weight.grad().defined() && net->weight.grad().device() == device, tag + ": gradients are bucket views on the device");
  dp->after_step(1);
  g->shutdown();
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a rank that aborts keeps what it printed
  if (const char* role = std::getenv("HT_CHECK_ROLE")) {
    const int rank = std::atoi(std::getenv("RANK")), world = std::atoi(std::getenv("WORLD_SIZE"));
    const std::string r = role;
    try {
      return rank_main(r, r == "nccl" ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU), rank, world);
    } catch (const std::exception& e) {
      std::printf("FAIL %s rank %d: %s\n", role, rank, e.what());
      return 1;
    }
  }
  std::printf("LibTorch %s, CUDA available: %d\n", TORCH_VERSION, torch::cuda::is_available() ? 1 : 0);
  // NCCL: one rank per GPU (NCCL refuses two ranks on one device); Gloo: two ranks on the CPU.
  struct Job { const char* backend; int world; const char* port; };
  int bad = 0;
  for (const Job& job : {Job{"nccl", 1, "29611"}, Job{"gloo", 2, "29612"}}) {
    std::vector<pid_t> pids;
    for (int r = 0; r < job.world; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::setenv("HT_CHECK_ROLE", job.backend, 1);
        ::setenv("RANK", std::to_string(r).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(job.world).c_str(), 1);
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", job.port, 1);
        ::execv("/proc/self/exe", argv);
        ::_exit(127);
      }
      pids.push_back(pid);
    }
    for (pid_t p : pids) {
      int status = 0;
      ::waitpid(p, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::printf("FAIL %s rank (pid %d) ended with status %d\n", job.backend, static_cast<int>(p), status);
        ++bad;
      }
    }
  }
  std::printf(bad ? "device check: FAILED\n" : "device check: all passed\n");
  (void)argc;
  return bad ? 1 : 0;
}
