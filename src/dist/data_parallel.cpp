// The trainer's data-parallel hooks: gradient buckets averaged by allreduce while backward still
// runs (DDP's scheme: accumulator hooks, buckets launched in order), step agreement, checkpoints.
#include "hybrid/dist/data_parallel.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <cstdio>
#include <mutex>
#include <sstream>

#include "hybrid/core/errors.h"
#include "zero_adamw.h"

namespace ht::dist {
namespace {

// Called by autograd after a parameter's gradient accumulator has added this backward's share.
class ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit ReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

std::string hex(uint64_t x) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// Every parameter's gradient lives in a bucket: p.grad() is a view of the bucket's flat buffer,
// so autograd accumulates straight into it and the allreduce needs no copies. Buckets hold the
// parameters in reverse order (roughly the order backward finishes them) and are launched
// strictly in index order, so every rank issues the same collectives in the same sequence.
class GradientBuckets {
 public:
  GradientBuckets(ProcessGroup& group, std::vector<at::Tensor> params, const DataParallelOptions& o)
      : group_(group), params_(std::move(params)), overlap_(o.overlap) {
    torch::NoGradGuard no_grad;
    const size_t n = params_.size();
    slot_bucket_.assign(n, 0);
    ready_.assign(n, false);
    views_.resize(n);
    // Plan: reverse parameter order, a new bucket when the cap is reached or the type changes.
    std::vector<std::vector<size_t>> plan;
    int64_t bytes = 0;
    for (size_t k = n; k-- > 0;) {
      const at::Tensor& p = params_[k];
      const int64_t b = p.numel() * static_cast<int64_t>(p.element_size());
      // The bucket being filled is plan.back(); the first one has the smaller cap.
      const int64_t cap = plan.size() == 1 ? o.first_bucket_bytes : o.bucket_bytes;
      const bool same_kind = !plan.empty() && params_[plan.back().front()].options().type_equal(p.options());
      if (plan.empty() || !same_kind || (bytes > 0 && bytes + b > cap)) {
        plan.emplace_back();
        bytes = 0;
      }
      plan.back().push_back(k);
      bytes += b;
    }
    for (const auto& members : plan) {
      Bucket bucket;
      int64_t numel = 0;
      for (size_t k : members) numel += params_[k].numel();
      bucket.flat = torch::zeros({numel}, params_[members.front()].options().requires_grad(false));
      int64_t off = 0;
      for (size_t k : members) {
        views_[k] = bucket.flat.narrow(0, off, params_[k].numel()).view(params_[k].sizes());
        off += params_[k].numel();
        slot_bucket_[k] = buckets_.size();
      }
      bucket.members = members;
      buckets_.push_back(std::move(bucket));
    }
    // The accumulators must stay alive (a parameter holds its own only weakly) for the hooks.
    for (size_t k = 0; k < n; ++k) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
      if (!acc) throw OptionsError("data parallel: parameter " + std::to_string(k) + " does not require a gradient");
      const uintptr_t key = acc->add_post_hook(std::make_unique<ReadyHook>([this, k] { on_ready(k); }));
      hooks_.emplace_back(std::move(acc), key);
    }
  }

  ~GradientBuckets() {
    for (auto& [acc, key] : hooks_) acc->del_post_hook(key);
  }

  size_t num_buckets() const { return buckets_.size(); }

  // Before each backward: every gradient is its bucket view (a strategy may have freed the
  // gradients, or replaced one); the last backward of a step arms the hooks.
  void before_backward(bool last, double weight) {
    std::lock_guard<std::mutex> lock(mutex_);
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < params_.size(); ++k) attach(k);
    if (!last) return;
    armed_ = true;
    weight_ = weight;
    next_ = 0;
    for (auto& b : buckets_) {
      b.pending = static_cast<int64_t>(b.members.size());
      b.work.reset();
    }
    std::fill(ready_.begin(), ready_.end(), false);
  }

  // Launches what is not launched yet (gradients backward did not reach, or all of them without
  // overlap, or after this rank failed) and waits for every bucket.
  void finish(const std::string& where) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!armed_) {  // this rank failed before its last backward: its buckets still owe a turn
      next_ = 0;
      for (auto& b : buckets_) b.work.reset();
    }
    for (; next_ < buckets_.size(); ++next_) launch(buckets_[next_]);
    lock.unlock();
    for (auto& b : buckets_) group_.wait(*b.work, "the gradient allreduce (" + where + ")");
    armed_ = false;
  }

 private:
  struct Bucket {
    at::Tensor flat;
    std::vector<size_t> members;
    int64_t pending = 0;
    std::unique_ptr<PendingWork> work;
  };

  void attach(size_t k) {
    const at::Tensor& g = params_[k].grad();
    if (g.defined() && g.data_ptr() == views_[k].data_ptr()) return;
    if (g.defined()) views_[k].copy_(g);
    else views_[k].zero_();
    params_[k].mutable_grad() = views_[k];
  }

  void on_ready(size_t k) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_ || ready_[k]) return;
    ready_[k] = true;
    attach(k);  // autograd accumulates in place into a defined gradient; this is a safety net
    Bucket& b = buckets_[slot_bucket_[k]];
    if (--b.pending > 0 || !overlap_) return;
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) launch(buckets_[next_++]);
  }

  void launch(Bucket& b) {
    torch::NoGradGuard no_grad;
    // Pre-scaled by this rank's share of the global batch, so the sum is the global mean.
    if (weight_ != 1.0) b.flat.mul_(weight_);
    b.work = group_.start_allreduce_sum(b.flat);
  }

  ProcessGroup& group_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> views_;
  std::vector<size_t> slot_bucket_;
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  std::mutex mutex_;
  bool overlap_;
  bool armed_ = false;
  double weight_ = 1.0;
  size_t next_ = 0;
};

class Replicas final : public DataParallel {
 public:
  Replicas(ProcessGroup& group, torch::nn::Module& module, Optimizer& optimizer, const ShardedData& data,
           const DataParallelOptions& o, Logger* logger)
      : group_(group), module_(module), optimizer_(optimizer), data_(data), o_(o), logger_(logger) {
    if (o.bucket_bytes < 1 || o.first_bucket_bytes < 1) throw OptionsError("data parallel: bucket sizes must be >= 1 byte");
    if (o.checksum_every < 0) throw OptionsError("data parallel: checksum_every must be >= 0 (0: at checkpoints only)");
    torch::NoGradGuard no_grad;
    // Rank 0's weights everywhere, whatever each rank initialised (or loaded) on its own.
    for (const auto& t : replicated()) {
      std::vector<at::Tensor> one{t.detach()};
      group_.broadcast(one, 0);
    }
    reseed_for_rank();
    buckets_ = std::make_unique<GradientBuckets>(group_, optimizer_.parameters(), o_);
    sharded_ = dynamic_cast<ShardedOptimizerState*>(&optimizer_);
    last_ = group_.stats();
    if (logger_)
      logger_->on_message(Level::Info, "data parallel: " + std::to_string(group_.world_size()) + " ranks, " +
                                            std::to_string(buckets_->num_buckets()) + " gradient buckets" +
                                            (sharded_ ? ", optimizer state sharded (ZeRO-1)" : ""));
  }

  Collective& collective() override { return group_; }

  void before_backward(bool last) override {
    group_.set_context("step " + std::to_string(step_ + 1));
    buckets_->before_backward(last, data_.share());
  }

  double finish_backward(double local_loss) override {
    buckets_->finish("step " + std::to_string(step_ + 1));
    return agree(local_loss, false);
  }

  void abort_backward() override {
    buckets_->finish("step " + std::to_string(step_ + 1));
    agree(0.0, true);
  }

  void save_rank_states(torch::serialize::OutputArchive& a) override {
    a.write("rank_states", rank_states_);  // [N, state bytes], gathered by before_checkpoint
  }

  void load_rank_states(torch::serialize::InputArchive& a) override {
    at::Tensor states;
    const int rank = group_.rank();
    if (a.try_read("rank_states", states) && rank < states.size(0)) {
      if (rank > 0) set_cpu_state(states[rank].clone());
      return;
    }
    // A checkpoint of fewer ranks (or of one process): this rank's stream starts afresh, as a
    // new run's would; rank 0 keeps the generator the "rng" part restored.
    reseed_for_rank();
  }

  void before_checkpoint(int64_t step) override {
    group_.set_context("the checkpoint at step " + std::to_string(step));
    compare_replicas(step, "before the checkpoint is written");
    at::Tensor mine = cpu_state();
    rank_states_ = torch::stack(group_.all_gather(mine));
    if (sharded_) sharded_->gather_state();
  }
  bool writes_checkpoints() const override { return group_.rank() == 0; }
  void after_checkpoint() override {
    if (sharded_) sharded_->release_gathered_state();
    group_.barrier();  // rank 0 wrote the file (or failed, and the others hear of it here)
  }

  void after_resume(int64_t step) override {
    step_ = step;
    const auto steps = group_.all_gather(torch::tensor({step}, torch::kInt64));
    for (int r = 0; r < group_.world_size(); ++r) {
      const int64_t s = steps[static_cast<size_t>(r)].item<int64_t>();
      if (s != step)
        throw DistributedError("rank " + std::to_string(r) + " resumed from step " + std::to_string(s) + " but rank " +
                               std::to_string(group_.rank()) + " from step " + std::to_string(step) +
                               ": every rank must read the same checkpoint directory (put run.out_dir on a file "
                               "system all machines share)");
    }
  }

  void annotate(StepRecord& rec) override {
    // Since the last record: the step itself, and the agreement and checks after the one before.
    const CommStats now = group_.stats();
    rec.extra["comm_bytes"] = static_cast<double>(now.sent_bytes - last_.sent_bytes);
    rec.extra["comm_payload_bytes"] = static_cast<double>(now.payload_bytes - last_.payload_bytes);
    rec.extra["comm_collectives"] = static_cast<double>(now.collectives - last_.collectives);
    rec.extra["comm_wait_ms"] = 1000.0 * (now.wait_seconds - last_.wait_seconds);
    last_ = now;
  }

  void after_step(int64_t step) override {
    step_ = step;
    if (o_.checksum_every > 0 && step % o_.checksum_every == 0) compare_replicas(step, "");
  }

 private:
  std::vector<at::Tensor> replicated() {
    std::vector<at::Tensor> ts = module_.parameters();
    for (const auto& b : module_.buffers())
      if (b.is_floating_point()) ts.push_back(b);
    return ts;
  }

  // [w * loss, w, failed]: one small allreduce gives the global loss and whether any rank failed.
  double agree(double local_loss, bool failed) {
    const double w = data_.share();
    std::vector<at::Tensor> t{torch::tensor({failed ? 0.0 : w * local_loss, w, failed ? 1.0 : 0.0}, torch::kFloat64)};
    group_.allreduce_sum(t);
    const auto v = t[0];
    if (v[2].item<double>() > 0)
      throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                  std::to_string(static_cast<int>(v[2].item<double>())) +
                                      " rank(s) ran out of memory in this step; every rank retries it alike");
    return v[0].item<double>() / v[1].item<double>();
  }

  void compare_replicas(int64_t step, const std::string& when) {
    const uint64_t mine = weight_checksum(replicated());
    const auto all = group_.all_gather(torch::tensor({static_cast<int64_t>(mine)}, torch::kInt64));
    const auto first = static_cast<uint64_t>(all[0].item<int64_t>());
    std::string differ;
    for (int r = 1; r < group_.world_size(); ++r)
      if (static_cast<uint64_t>(all[static_cast<size_t>(r)].item<int64_t>()) != first)
        differ += (differ.empty() ? "rank " : ", rank ") + std::to_string(r) + " (" +
                  hex(static_cast<uint64_t>(all[static_cast<size_t>(r)].item<int64_t>())) + ")";
    if (differ.empty()) return;
    throw DistributedError("the replicas' weights differ at step " + std::to_string(step) +
                           (when.empty() ? "" : " " + when) + ": " + differ + " against rank 0 (" + hex(first) +
                           "). Training on would average gradients of different models, so the run stops. Nothing "
                           "was saved from these weights; rerun the command to resume from the last checkpoint "
                           "(each was checked the same way). If it recurs, a rank's hardware or a non-deterministic "
                           "operation is at fault");
  }

  static at::Tensor cpu_state() {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
  }
  static void set_cpu_state(const at::Tensor& state) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
  void reseed_for_rank() {
    const int r = group_.rank();
    if (r == 0) return;
    uint64_t s = o_.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(r));
    torch::manual_seed(s);
  }

  ProcessGroup& group_;
  torch::nn::Module& module_;
  Optimizer& optimizer_;
  const ShardedData& data_;
  DataParallelOptions o_;
  Logger* logger_;
  std::unique_ptr<GradientBuckets> buckets_;
  ShardedOptimizerState* sharded_ = nullptr;
  at::Tensor rank_states_;
  int64_t step_ = 0;
  CommStats last_;  // at the last annotate()
};

}  // namespace

std::shared_ptr<DataParallel> make_data_parallel(ProcessGroup& group, torch::nn::Module& module, Optimizer& optimizer,
                                                 const ShardedData& data, const DataParallelOptions& options,
                                                 Logger* logger) {
  return std::make_shared<Replicas>(group, module, optimizer, data, options, logger);
}

}  // namespace ht::dist
