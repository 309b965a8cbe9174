// ZeRO stage 1 AdamW: each rank keeps the moments of 1/N of the flattened parameters, updates
// that range with make_adamw's loop (kernels/adamw_loop.h, so the same bits) and all-gathers the rest.
#include <cmath>
#include <sstream>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "hybrid/core/errors.h"
#include "hybrid/dist/data_parallel.h"
#include "kernels/adamw_loop.h"
#include "zero_adamw.h"

namespace ht::dist {
namespace {

class ZeroAdamW final : public SingleRateOptimizer, public ShardedOptimizerState {
 public:
  ZeroAdamW(std::vector<at::Tensor> params, const AdamWOptions& o, ProcessGroup& group, int64_t bucket_bytes)
      : SingleRateOptimizer(o.lr), params_(std::move(params)), o_(o), group_(group) {
    validate(o_);
    for (const auto& p : params_) {
      if (p.scalar_type() != at::kFloat || !p.is_contiguous() || !p.is_cpu())
        throw OptionsError("dist.shard_optimizer: every parameter must be a contiguous float32 tensor on the CPU "
                           "(its update loop is the CPU AdamW's); leave it off on a GPU");
      offsets_.push_back(total_);
      total_ += p.numel();
    }
    const int64_t n = group_.world_size();
    chunk_ = (total_ + n - 1) / n;
    begin_ = std::min(total_, chunk_ * group_.rank());
    end_ = std::min(total_, begin_ + chunk_);
    // The all-gather's window: N slices of `window_` floats in flight, at most bucket_bytes in
    // all and an eighth of the range, so its buffers ((N + 1) windows) stay small beside the
    // moments sharding saves; small models pay a few more rounds of latency for it.
    window_ = std::max<int64_t>(1, std::min((chunk_ + 7) / 8, bucket_bytes / 4 / n));
    torch::NoGradGuard no_grad;
    m_ = torch::zeros({end_ - begin_}, params_.front().options());
    v_ = torch::zeros({end_ - begin_}, params_.front().options());
  }

  void step() override {
    torch::NoGradGuard no_grad;
    ++t_;
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
    // This rank's range, parameter by parameter: the segment [lo, hi) of each that it overlaps.
    for_each_segment(begin_, end_, [&](size_t i, int64_t lo, int64_t hi, int64_t flat) {
      const auto& p = params_[i];
      const auto& g = p.grad();
      if (!g.defined()) return;
      const bool decay = !o_.decay_matrices_only || p.dim() >= 2;
      update(p.data_ptr<float>() + lo, g.contiguous().data_ptr<float>() + lo, m_.data_ptr<float>() + (flat - begin_),
             v_.data_ptr<float>() + (flat - begin_), hi - lo, decay ? o_.weight_decay : 0.0, bc1, bc2);
    });
    gather_parameters();
  }

  void zero_grad() override {
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
  const std::vector<at::Tensor>& parameters() const override { return params_; }
  // The moments' layout in checkpoints is make_adamw's, so the two are interchangeable.
  std::string name() const override { return "adamw"; }
  int64_t state_bytes() const override { return m_.nbytes() + v_.nbytes(); }

  void gather_state() override {
    torch::NoGradGuard no_grad;
    // Each rank's range, padded to the common chunk, gathered on rank 0: [N * chunk] per moment.
    auto padded = [&](const at::Tensor& t) {
      at::Tensor out = torch::zeros({chunk_}, t.options());
      out.narrow(0, 0, t.numel()).copy_(t);
      return out;
    };
    const bool root = group_.rank() == 0;
    at::Tensor m_all, v_all;
    if (root) {
      m_all = torch::empty({chunk_ * group_.world_size()}, m_.options());
      v_all = torch::empty({chunk_ * group_.world_size()}, v_.options());
    }
    group_.gather(padded(m_), m_all, 0);
    group_.gather(padded(v_), v_all, 0);
    gathered_m_.clear();
    gathered_v_.clear();
    if (!root) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      gathered_m_.push_back(m_all.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes()));
      gathered_v_.push_back(v_all.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes()));
    }
  }
  void release_gathered_state() override {
    gathered_m_.clear();
    gathered_v_.clear();
  }

  void save(torch::serialize::OutputArchive& a) const override {
    if (gathered_m_.size() != params_.size())
      throw std::logic_error("zero adamw: save() needs gather_state() on every rank first (DataParallel::before_checkpoint)");
    a.write("kind", torch::tensor(1));  // make_adamw's tag: the files are interchangeable
    a.write("t", torch::tensor(t_));
    write_list(a, "m", gathered_m_);
    write_list(a, "v", gathered_v_);
  }

  void load(torch::serialize::InputArchive& a) override {
    at::Tensor kind;
    if (!a.try_read("kind", kind) || kind.item<int64_t>() != 1)
      throw std::runtime_error("the checkpoint holds no AdamW state: dist.shard_optimizer needs optim.name = adamw");
    at::Tensor t;
    a.read("t", t);
    torch::NoGradGuard no_grad;
    for (const char* key : {"m", "v"}) {
      at::Tensor& mine = key[0] == 'm' ? m_ : v_;
      at::Tensor count;
      a.read(std::string(key) + ".count", count);
      if (count.item<int64_t>() != static_cast<int64_t>(params_.size()))
        throw std::runtime_error("optimizer state '" + std::string(key) + "' holds " + std::to_string(count.item<int64_t>()) +
                                 " tensors, the model has " + std::to_string(params_.size()) +
                                 " parameters: checkpoint of another model?");
      // Only this rank's range is kept from each full tensor.
      for_each_segment(begin_, end_, [&](size_t i, int64_t lo, int64_t hi, int64_t flat) {
        at::Tensor full;
        a.read(std::string(key) + "." + std::to_string(i), full);
        if (!full.sizes().equals(params_[i].sizes()))
          throw std::runtime_error("optimizer state '" + std::string(key) + "." + std::to_string(i) + "' has shape " +
                                   c10::str(full.sizes()) + ", expected " + c10::str(params_[i].sizes()));
        mine.narrow(0, flat - begin_, hi - lo).copy_(full.reshape({-1}).narrow(0, lo, hi - lo));
      });
    }
    t_ = t.item<int64_t>();
  }

 private:
  // Calls fn(param index, begin, end within the parameter, flat index of begin) for every
  // parameter overlapping the flat range [from, to).
  template <typename F>
  void for_each_segment(int64_t from, int64_t to, F&& fn) const {
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t p0 = offsets_[i], p1 = p0 + params_[i].numel();
      const int64_t lo = std::max(from, p0), hi = std::min(to, p1);
      if (lo < hi) fn(i, lo - p0, hi - p0, lo);
    }
  }

  // make_adamw's fused loop over one segment (kernels/adamw_loop.h): the same bits.
  void update(float* pw, const float* gw, float* mw, float* vw, int64_t n, double wd, double bc1, double bc2) {
    adamw_f32_range(pw, gw, mw, vw, n, AdamWScalars{lr_, o_.beta1, o_.beta2, o_.eps, wd, bc1, bc2});
  }

  // Copies the flat range [from, from + n) of the parameters into (to_params = false) or out of
  // a contiguous buffer; positions past the last parameter are padding (zeros when reading).
  void copy_flat(int64_t from, int64_t n, const at::Tensor& buffer, bool to_params) {
    if (!to_params && from + n > total_) buffer.narrow(0, std::max<int64_t>(0, total_ - from), std::min(n, from + n - total_)).zero_();
    for_each_segment(from, std::min(total_, from + n), [&](size_t i, int64_t lo, int64_t hi, int64_t flat) {
      at::Tensor piece = params_[i].view({-1}).narrow(0, lo, hi - lo);
      at::Tensor slot = buffer.narrow(0, flat - from, hi - lo);
      if (to_params) piece.copy_(slot);
      else slot.copy_(piece);
    });
  }

  // Window by window: this rank's updated slice goes out, every rank's comes back into place.
  void gather_parameters() {
    const int n = group_.world_size();
    if (n == 1) return;
    if (!send_.defined()) {
      send_ = torch::empty({window_}, params_.front().options());
      recv_ = torch::empty({window_ * n}, params_.front().options());
    }
    for (int64_t w = 0; w < chunk_; w += window_) {
      const int64_t len = std::min(window_, chunk_ - w);
      at::Tensor send = send_.narrow(0, 0, len);
      copy_flat(begin_ + w, len, send, false);
      std::vector<at::Tensor> outs;
      for (int q = 0; q < n; ++q) outs.push_back(recv_.narrow(0, q * len, len));
      auto work = group_.start_all_gather(send, outs);
      group_.wait(*work, "the parameter all-gather of the sharded optimizer");
      for (int q = 0; q < n; ++q)
        if (q != group_.rank()) copy_flat(chunk_ * q + w, len, outs[static_cast<size_t>(q)], true);
    }
  }

  static void write_list(torch::serialize::OutputArchive& a, const std::string& key, const std::vector<at::Tensor>& ts) {
    a.write(key + ".count", torch::tensor(static_cast<int64_t>(ts.size())));
    for (size_t i = 0; i < ts.size(); ++i) a.write(key + "." + std::to_string(i), ts[i]);
  }

  std::vector<at::Tensor> params_;
  std::vector<int64_t> offsets_;  // flat index of each parameter's first element
  AdamWOptions o_;
  ProcessGroup& group_;
  int64_t total_ = 0;   // elements in all parameters
  int64_t chunk_ = 0;   // elements per rank (the last rank's range may be shorter)
  int64_t begin_ = 0, end_ = 0;  // this rank's flat range
  int64_t window_ = 0;
  at::Tensor m_, v_;    // [end_ - begin_]
  at::Tensor send_, recv_;
  std::vector<at::Tensor> gathered_m_, gathered_v_;  // rank 0, between gather_state and save
  int64_t t_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> make_zero_adamw(std::vector<at::Tensor> params, const AdamWOptions& options,
                                           ProcessGroup& group, int64_t bucket_bytes) {
  if (params.empty()) throw OptionsError("zero adamw: no parameters");
  return std::make_unique<ZeroAdamW>(std::move(params), options, group, bucket_bytes);
}

}  // namespace ht::dist
