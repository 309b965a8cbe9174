// Data-parallel training over Gloo with two or three local processes: N ranks x B/N train like
// one process x B, resume bit-exactly, and a dead, frozen or diverged rank stops the run by name.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dist_worker.h"
#include "hybrid/core/trainer.h"
#include "hybrid/dist/data_parallel.h"
#include "hybrid/dist/process_group.h"
#include "hybrid/kernels/optimizers.h"
#include "support/toy_problem.h"
#include "support/remove_tree.h"

namespace ht::testing {
namespace fs = std::filesystem;
namespace {

// What a rank (or the single-process reference) runs, passed to workers in HT_T_* variables.
struct Scenario {
  int64_t steps = 50;
  int64_t batch = 64;
  int64_t accum = 1;
  bool shard = false;
  std::string ckpt;            // checkpoint directory ("" = none)
  int64_t ckpt_every = 0;
  bool resume = false;
  int64_t checksum_every = 0;
  int64_t perturb_at = 0;      // rank 1 nudges a weight after this step
  int64_t kill_at = 0;         // rank 1 sends itself SIGKILL after this step
  int64_t freeze_at = 0;       // rank 1 sends itself SIGSTOP after this step
  int64_t oom_rows = 0;        // rank 0's loss runs "out of memory" on chunks of more rows
  double timeout = 20;         // dist timeout, seconds

  std::vector<std::pair<std::string, std::string>> vars() const {
    return {{"HT_T_STEPS", std::to_string(steps)},         {"HT_T_BATCH", std::to_string(batch)},
            {"HT_T_ACCUM", std::to_string(accum)},         {"HT_T_SHARD", shard ? "1" : "0"},
            {"HT_T_CKPT", ckpt},                           {"HT_T_CKPT_EVERY", std::to_string(ckpt_every)},
            {"HT_T_RESUME", resume ? "1" : "0"},           {"HT_T_CHECKSUM", std::to_string(checksum_every)},
            {"HT_T_PERTURB", std::to_string(perturb_at)},  {"HT_T_KILL", std::to_string(kill_at)},
            {"HT_T_FREEZE", std::to_string(freeze_at)},    {"HT_T_TIMEOUT", std::to_string(timeout)},
            {"HT_T_OOM_ROWS", std::to_string(oom_rows)}};
  }
  static Scenario from_env() {
    auto num = [](const char* k) { return std::strtod(std::getenv(k), nullptr); };
    Scenario s;
    s.steps = static_cast<int64_t>(num("HT_T_STEPS"));
    s.batch = static_cast<int64_t>(num("HT_T_BATCH"));
    s.accum = static_cast<int64_t>(num("HT_T_ACCUM"));
    s.shard = num("HT_T_SHARD") != 0;
    s.ckpt = std::getenv("HT_T_CKPT");
    s.ckpt_every = static_cast<int64_t>(num("HT_T_CKPT_EVERY"));
    s.resume = num("HT_T_RESUME") != 0;
    s.checksum_every = static_cast<int64_t>(num("HT_T_CHECKSUM"));
    s.perturb_at = static_cast<int64_t>(num("HT_T_PERTURB"));
    s.kill_at = static_cast<int64_t>(num("HT_T_KILL"));
    s.freeze_at = static_cast<int64_t>(num("HT_T_FREEZE"));
    s.timeout = num("HT_T_TIMEOUT");
    s.oom_rows = static_cast<int64_t>(num("HT_T_OOM_ROWS"));
    return s;
  }
};

std::shared_ptr<ToyNet> make_net() {
  torch::manual_seed(3);
  return std::make_shared<ToyNet>(16);
}

AdamWOptions adamw() {
  AdamWOptions o;
  o.lr = 0.02;
  o.weight_decay = 0.1;
  return o;
}

TrainerOptions trainer_options(const Scenario& s) {
  TrainerOptions o;
  o.max_steps = s.steps;
  o.grad_accum = s.accum;
  o.eval_every = 0;
  o.checkpoint.dir = s.ckpt;
  o.checkpoint.every_steps = s.ckpt_every;
  o.checkpoint.every_seconds = 0;
  return o;
}

std::vector<float> flat_weights(torch::nn::Module& m) {
  std::vector<float> w;
  for (const auto& p : m.parameters()) {
    const at::Tensor c = p.detach().contiguous().view({-1});
    w.insert(w.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return w;
}

struct Result {
  std::vector<float> weights;
  double val_loss = NAN;
};

void write_result(const std::string& path, const Result& r) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&r.val_loss), sizeof r.val_loss);
  out.write(reinterpret_cast<const char*>(r.weights.data()), static_cast<std::streamsize>(r.weights.size() * sizeof(float)));
}

Result read_result(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Result r;
  in.read(reinterpret_cast<char*>(&r.val_loss), sizeof r.val_loss);
  float x;
  while (in.read(reinterpret_cast<char*>(&x), sizeof x)) r.weights.push_back(x);
  return r;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result single_process(const Scenario& s) {
  auto net = make_net();
  auto objective = toy_objective(net);
  ToyData data(s.batch, 7);
  auto optimizer = make_adamw(net->parameters(), adamw());
  Trainer trainer(*objective, *optimizer, data, trainer_options(s));
  const EvalRecord r = trainer.fit();
  return {flat_weights(*net), r.val_loss};
}

// Rank 1's misbehaviour, on cue: a nudged weight, a SIGKILL, a SIGSTOP.
class Sabotage final : public Callback {
 public:
  explicit Sabotage(Scenario s) : s_(std::move(s)) {}
  void on_step_end(Trainer& trainer, const StepRecord& rec) override {
    if (rec.step == s_.perturb_at) {
      torch::NoGradGuard no_grad;
      trainer.optimizer().parameters().front().view({-1})[0].add_(1e-3);
    }
    if (rec.step == s_.kill_at) ::raise(SIGKILL);
    if (rec.step == s_.freeze_at) ::raise(SIGSTOP);
  }

 private:
  Scenario s_;
};

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// N ranks of this binary running `scenario`; results land in out + ".result" (rank 0) and
// out + ".error.<rank>" (a rank that stopped with an error).
struct Ranks {
  struct Exit {
    int code = -1;    // exit status, or -1
    int signal = 0;   // the signal that ended it
    double seconds = 0;  // from the start
  };

  Ranks(int n, const Scenario& s, const std::string& out) {
    const std::string port = std::to_string(free_port());
    start_ = std::chrono::steady_clock::now();
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        for (const auto& [k, v] : s.vars()) ::setenv(k.c_str(), v.c_str(), 1);
        ::setenv("HT_DIST_WORKER", "train", 1);
        ::setenv("HT_DIST_OUT", out.c_str(), 1);
        ::setenv("RANK", std::to_string(r).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", port.c_str(), 1);
        ::execl("/proc/self/exe", "test_dist", static_cast<char*>(nullptr));
        ::_exit(127);
      }
      pids_.push_back(pid);
    }
  }
  ~Ranks() { kill_all(); }

  // Waits for rank r (or until timeout_s, when it is killed and reported as such).
  Exit wait(int r, double timeout_s = 60) {
    Exit e;
    const pid_t pid = pids_[static_cast<size_t>(r)];
    if (pid <= 0) return e;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pids_[static_cast<size_t>(r)] = 0;
    e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    return e;
  }
  std::vector<Exit> wait_all(double timeout_s = 60) {
    std::vector<Exit> exits;
    for (size_t r = 0; r < pids_.size(); ++r) exits.push_back(wait(static_cast<int>(r), timeout_s));
    return exits;
  }
  void kill_all() {
    for (pid_t& pid : pids_)
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        pid = 0;
      }
  }

 private:
  std::vector<pid_t> pids_;
  std::chrono::steady_clock::time_point start_;
};

std::string scratch(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("ht-dist-" + std::to_string(::getpid()) + "-" + name);
  ht::testing::remove_tree(d);
  fs::create_directories(d);
  return d.string();
}

Result run_ranks(int n, const Scenario& s, const std::string& out) {
  Ranks ranks(n, s, out);
  const auto exits = ranks.wait_all();
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(exits[static_cast<size_t>(r)].code, 0)
        << "rank " << r << ": " << read_text(out + ".error." + std::to_string(r));
  return read_result(out + ".result");
}

// Float tolerance: the ranks' partial gradients are summed in another order than one process
// sums the whole batch, and 50 Adam steps carry those last-bit differences along.
void expect_close(const Result& a, const Result& b, double tol = 1e-5) {
  ASSERT_EQ(a.weights.size(), b.weights.size());
  ASSERT_FALSE(a.weights.empty());
  double worst = 0;
  for (size_t i = 0; i < a.weights.size(); ++i)
    worst = std::max(worst, std::abs(double(a.weights[i]) - double(b.weights[i])) / std::max(1.0, std::abs(double(a.weights[i]))));
  EXPECT_LT(worst, tol) << "largest weight difference";
  std::printf("largest weight difference %.3g (relative, tolerance %.3g), validation loss %.9g vs %.9g\n", worst, tol,
              a.val_loss, b.val_loss);
  EXPECT_NEAR(a.val_loss, b.val_loss, tol * std::max(1.0, std::abs(a.val_loss)));
}

}  // namespace

int run_dist_worker(const std::string& /*scenario*/) {
  const Scenario s = Scenario::from_env();
  const std::string out = std::getenv("HT_DIST_OUT");
  dist::DistEnvironment env;
  try {
    env = dist::environment_from_env();
    dist::ProcessGroupOptions po;
    po.env = env;
    po.timeout_seconds = s.timeout;
    po.heartbeat_seconds = 0.25;
    auto group = dist::ProcessGroup::create(po);
    auto net = make_net();
    auto objective = toy_objective(net);
    if (s.oom_rows > 0 && env.rank == 0) {
      // Rank 0 alone "runs out of memory" on large chunks: a failure the other rank must share.
      objective = make_objective(net, [net, rows = s.oom_rows](const Batch& b) {
        if (b.input.size(0) > rows)
          throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, "simulated: too many rows");
        return torch::mse_loss(net->forward(b.input), b.target);
      });
    }
    dist::ShardedData data(std::make_unique<ToyData>(s.batch, 7), env.rank, env.world_size);
    // Buckets of 64 and 128 bytes: the toy net's 65 parameters spread over three of them.
    const int64_t bucket = 128;
    std::unique_ptr<Optimizer> optimizer = s.shard ? dist::make_zero_adamw(net->parameters(), adamw(), *group, bucket)
                                                   : make_adamw(net->parameters(), adamw());
    TrainerOptions o = trainer_options(s);
    dist::DataParallelOptions d;
    d.bucket_bytes = bucket;
    d.first_bucket_bytes = 64;
    d.checksum_every = s.checksum_every;
    d.seed = 11;
    o.parallel = dist::make_data_parallel(*group, *net, *optimizer, data, d);
    Trainer trainer(*objective, *optimizer, data, o);
    if (env.rank == 1) trainer.add_callback(std::make_shared<Sabotage>(s));
    if (s.resume && trainer.resume_latest(s.ckpt).empty()) throw std::runtime_error("nothing to resume from");
    const EvalRecord r = trainer.fit();
    group->shutdown();
    if (env.rank == 0) write_result(out + ".result", {flat_weights(*net), r.val_loss});
    std::ofstream(out + ".splits." + std::to_string(env.rank)) << trainer.options().micro_splits;
    return 0;
  } catch (const dist::DistributedError& e) {
    std::ofstream(out + ".error." + std::to_string(env.rank)) << e.what();
    return 7;
  } catch (const std::exception& e) {
    std::ofstream(out + ".error." + std::to_string(env.rank)) << "other error: " << e.what();
    return 1;
  }
}

TEST(DataParallel, TwoRanksTrainLikeOneProcessWithTheWholeBatch) {
  const std::string dir = scratch("two");
  Scenario s;  // 50 steps, global batch 64: 32 rows per rank
  expect_close(run_ranks(2, s, dir + "/r"), single_process(s));
  ht::testing::remove_tree(dir);
}

TEST(DataParallel, ShardedOptimizerTrainsLikeOneProcess) {
  const std::string dir = scratch("zero");
  Scenario s;
  s.shard = true;  // each rank keeps the moments of 33 of the 65 parameters
  expect_close(run_ranks(2, s, dir + "/r"), single_process(s));
  ht::testing::remove_tree(dir);
}

TEST(DataParallel, ThreeRanksWithAccumulationAndUnevenShardsTrainLikeOneProcess) {
  const std::string dir = scratch("three");
  Scenario s;
  s.batch = 50;  // 17, 17 and 16 rows: the gradients are weighted by each rank's share
  s.accum = 2;   // one allreduce per optimizer step, on the second batch's backward
  s.shard = true;
  expect_close(run_ranks(3, s, dir + "/r"), single_process(s));
  ht::testing::remove_tree(dir);
}

// Checkpoints are written by rank 0 with the sharded moments gathered into it; 10 steps, a
// resume and 10 more end where 20 straight steps do, bit for bit.
TEST(DataParallel, ResumeWithTheSameRanksIsBitExact) {
  const std::string dir = scratch("resume");
  Scenario straight;
  straight.steps = 20;
  straight.shard = true;
  straight.ckpt = dir + "/a";
  straight.ckpt_every = 10;
  const Result a = run_ranks(2, straight, dir + "/a");
  Scenario half = straight;
  half.steps = 10;
  half.ckpt = dir + "/b";
  run_ranks(2, half, dir + "/b1");
  ASSERT_TRUE(fs::exists(dir + "/b/ckpt-000000010.ht"));
  Scenario rest = half;
  rest.steps = 20;
  rest.resume = true;
  const Result b = run_ranks(2, rest, dir + "/b2");
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.val_loss, b.val_loss);

  // Three ranks take over the two-rank checkpoint: the same global batches follow (the cursor
  // is global), so they end where the straight run does within float tolerance, not bit for bit.
  fs::remove(dir + "/b/ckpt-000000020.ht");
  rest.shard = false;  // and the gathered moments load into an unsharded optimizer
  expect_close(run_ranks(3, rest, dir + "/b3"), a);
  ht::testing::remove_tree(dir);
}

TEST(DataParallel, ReplicasThatDivergeStopTheRunNamingTheRank) {
  const std::string dir = scratch("diverge");
  Scenario s;
  s.steps = 20;
  s.perturb_at = 3;      // rank 1's weights drift from rank 0's after step 3 ...
  s.checksum_every = 4;  // ... and the comparison at step 4 catches it
  Ranks ranks(2, s, dir + "/r");
  for (const auto& e : ranks.wait_all()) EXPECT_EQ(e.code, 7);
  for (int r = 0; r < 2; ++r) {
    const std::string msg = read_text(dir + "/r.error." + std::to_string(r));
    EXPECT_NE(msg.find("weights differ at step 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 ("), std::string::npos) << msg;
    if (r == 0) std::printf("%s\n", msg.c_str());
  }
  ht::testing::remove_tree(dir);
}

TEST(DataParallel, ARankKilledWithSigkillIsNamedByTheOthers) {
  const std::string dir = scratch("kill");
  Scenario s;
  s.kill_at = 5;
  s.timeout = 20;
  Ranks ranks(2, s, dir + "/r");
  const auto killed = ranks.wait(1);
  EXPECT_EQ(killed.signal, SIGKILL);
  const auto e = ranks.wait(0);
  EXPECT_EQ(e.code, 7);
  // The peer's socket closes at once; naming it takes three heartbeats (0.75 s), not the timeout.
  EXPECT_LT(e.seconds - killed.seconds, 10.0);
  const std::string msg = read_text(dir + "/r.error.0");
  EXPECT_NE(msg.find("rank 1 stopped responding"), std::string::npos) << msg;
  EXPECT_NE(msg.find("resume"), std::string::npos) << msg;
  std::printf("rank 0 stopped %.2f s after rank 1 was killed: %s\n", e.seconds - killed.seconds, msg.c_str());
  ht::testing::remove_tree(dir);
}

TEST(DataParallel, AFrozenRankIsNamedWhenTheTimeoutExpires) {
  const std::string dir = scratch("freeze");
  Scenario s;
  s.freeze_at = 5;  // SIGSTOP: the process (and its heartbeat) stands still, its sockets stay open
  s.timeout = 3;
  Ranks ranks(2, s, dir + "/r");
  const auto e = ranks.wait(0, 30);
  EXPECT_EQ(e.code, 7);
  EXPECT_LT(e.seconds, 3 + 10.0);  // the timeout, three heartbeats, start-up
  const std::string msg = read_text(dir + "/r.error.0");
  EXPECT_NE(msg.find("rank 1 stopped responding"), std::string::npos) << msg;
  std::printf("rank 0 stopped %.2f s after the start: %s\n", e.seconds, msg.c_str());
  ranks.kill_all();
  ht::testing::remove_tree(dir);
}

// The memory ladder under DP: rank 0 alone fails a step; every rank rewinds and retries it, and
// both take the same rung (two micro-batches), so no collective is left waiting.
TEST(DataParallel, AnOutOfMemoryOnOneRankIsRetriedByEveryRankAlike) {
  const std::string dir = scratch("oom");
  Scenario s;
  s.steps = 20;
  s.oom_rows = 16;  // each rank's shard is 32 rows: rank 0 fits only half of it
  const Result r = run_ranks(2, s, dir + "/r");
  EXPECT_EQ(read_text(dir + "/r.splits.0"), "2");
  EXPECT_EQ(read_text(dir + "/r.splits.1"), "2");
  expect_close(r, single_process(s));  // split batches give the same gradients
  ht::testing::remove_tree(dir);
}

TEST(DataParallel, WeightChecksumSeesEveryBitAndNoThreadCount) {
  torch::manual_seed(0);
  std::vector<at::Tensor> w = {torch::randn({1000, 37}), torch::randn({5})};
  const uint64_t h = dist::weight_checksum(w);
  at::set_num_threads(1);
  EXPECT_EQ(dist::weight_checksum(w), h);
  at::set_num_threads(2);
  int32_t* bits = w[0].view(torch::kInt32).data_ptr<int32_t>();
  bits[12345] ^= 1;  // one bit of one element
  EXPECT_NE(dist::weight_checksum(w), h);
  bits[12345] ^= 1;
  EXPECT_EQ(dist::weight_checksum(w), h);
  std::swap(w[0], w[1]);  // the same tensors in another order
  EXPECT_NE(dist::weight_checksum(w), h);
}

}  // namespace ht::testing
