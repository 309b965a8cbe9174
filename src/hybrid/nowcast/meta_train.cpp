// Meta-training WNN+ with autograd on recorded trajectories: windows normalised per tensor as a jump
// normalises them, L1 on all 40 horizons at once (NiNo's train_nino.py), AdamW with cosine decay.
#include <cmath>
#include <random>

#include <torch/torch.h>

#include "hybrid/core/safetensors.h"
#include "hybrid/hybrid/nowcast_meta.h"
#include "meta_net.h"
#include "tensor_scale.h"

namespace ht {
namespace {

constexpr int kCtx = kNowcastContext;
using nowcast::MetaNet;

struct Samples {
  at::Tensor x, kind, y, mask;  // [N, 5], [N], [N, H], [N, H] (1 where the target exists)
};

class Sampler {
 public:
  Sampler(const std::vector<Trajectory>& corpus, const MetaTrainOptions& o) : corpus_(corpus), o_(o) {
    for (size_t j = 0; j < corpus.size(); ++j)
      for (size_t i = 0; i < corpus[j].tensors.size(); ++i) {
        const auto& t = corpus[j].tensors[i];
        if (t.values.dim() == 2 && t.values.size(0) >= kCtx + 1 && t.values.size(1) > 0) pairs_.emplace_back(j, i);
      }
    if (pairs_.empty())
      throw NowcastError("meta-training: no trajectory has " + std::to_string(kCtx + 1) +
                         " or more recorded states; record longer runs");
  }

  Samples draw(std::mt19937_64& rng) const {
    std::vector<at::Tensor> xs, kinds, ys, masks;
    std::uniform_int_distribution<size_t> pick_pair(0, pairs_.size() - 1);
    for (int64_t w = 0; w < o_.windows; ++w) {
      for (int attempt = 0; attempt < 20; ++attempt) {
        const auto [j, i] = pairs_[pick_pair(rng)];
        const TrajectoryTensor& tt = corpus_[j].tensors[i];
        const int64_t T = tt.values.size(0), M = tt.values.size(1);
        const int64_t t = std::uniform_int_distribution<int64_t>(kCtx - 1, T - 2)(rng);  // window t-4..t
        // The whole tensor's mean and unbiased std over the 5 states, as tensor_scale computes them.
        double s = 0.0, sq = 0.0;
        for (int64_t u = t - kCtx + 1; u <= t; ++u) {
          s += tt.sum[static_cast<size_t>(u)];
          sq += tt.sumsq[static_cast<size_t>(u)];
        }
        const double total = static_cast<double>(tt.numel) * kCtx;
        const double mean = s / total;
        const double var = total > 1 ? std::max(0.0, (sq - total * mean * mean) / (total - 1.0)) : 0.0;
        const double std = std::sqrt(var);
        if (!(std > 1e-7) || !std::isfinite(std)) continue;  // a frozen tensor: nothing to learn
        std::vector<int64_t> idx(static_cast<size_t>(o_.scalars));
        std::uniform_int_distribution<int64_t> pick(0, M - 1);
        for (auto& v : idx) v = pick(rng);
        const at::Tensor index = at::tensor(idx, at::kLong);
        const at::Tensor v = ((tt.values.index_select(1, index).to(at::kDouble) - mean) / (std + nowcast::kNormEps))
                                 .to(at::kFloat);  // [T, S]
        const at::Tensor x = v.narrow(0, t - kCtx + 1, kCtx).t();  // [S, 5]
        const int64_t ahead = std::min(o_.horizons, T - 1 - t);
        const at::Tensor last = x.select(1, kCtx - 1).unsqueeze(1);
        at::Tensor y = at::zeros({o_.scalars, o_.horizons}, at::kFloat);
        y.narrow(1, 0, ahead).copy_(last + (v.narrow(0, t + 1, ahead).t() - last).clamp(-o_.target_clip, o_.target_clip));
        at::Tensor mask = at::zeros({o_.scalars, o_.horizons}, at::kFloat);
        mask.narrow(1, 0, ahead).fill_(1.0);
        xs.push_back(x);
        kinds.push_back(tt.kinds.index_select(0, index));
        ys.push_back(y);
        masks.push_back(mask);
        break;
      }
    }
    if (xs.empty()) throw NowcastError("meta-training: every drawn window came from a tensor that did not move");
    return {at::cat(xs), at::cat(kinds), at::cat(ys), at::cat(masks)};
  }

 private:
  const std::vector<Trajectory>& corpus_;
  const MetaTrainOptions& o_;
  std::vector<std::pair<size_t, size_t>> pairs_;
};

at::Tensor l1_loss(const MetaNet& net, const Samples& s) {
  return ((net.forward(s.x, s.kind) - s.y).abs() * s.mask).sum() / s.mask.sum().clamp_min(1.0);
}

void check(const MetaTrainOptions& o) {
  if (o.hidden < 1 || o.horizons < 1 || o.steps < 1 || o.windows < 1 || o.scalars < 1)
    throw NowcastError("MetaTrainOptions: hidden, horizons, steps, windows and scalars must be >= 1");
  if (!(o.lr > 0.0) || !(o.min_lr >= 0.0) || !(o.weight_decay >= 0.0) || !(o.grad_clip >= 0.0) || !(o.target_clip > 0.0))
    throw NowcastError("MetaTrainOptions: lr > 0, min_lr, weight_decay, grad_clip >= 0 and target_clip > 0 required");
}

}  // namespace

MetaTrainResult meta_train_wnn_plus(const std::vector<Trajectory>& corpus, const MetaTrainOptions& o,
                                    const MetaProgress& progress) {
  check(o);
  const Sampler sampler(corpus, o);
  std::mt19937_64 rng(o.seed);
  MetaNet net = MetaNet::init(o.hidden, o.horizons, o.seed);
  std::vector<at::Tensor> params = net.all();
  for (auto& p : params) p.set_requires_grad(true);
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  MetaTrainResult result;
  for (int64_t step = 0; step < o.steps; ++step) {
    const double lr = o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * static_cast<double>(step) / o.steps));
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    const Samples s = sampler.draw(rng);
    opt.zero_grad();
    const at::Tensor loss = l1_loss(net, s);
    loss.backward();
    if (o.grad_clip > 0.0) torch::nn::utils::clip_grad_norm_(params, o.grad_clip);
    opt.step();
    result.losses.push_back(loss.item<double>());
    if (progress) progress(step + 1, result.losses.back(), lr);
  }
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : net.named()) result.weights[name] = t.detach().clone();
  return result;
}

double meta_eval_loss(const std::map<std::string, at::Tensor>& weights, const std::vector<Trajectory>& corpus,
                      const MetaTrainOptions& o, int64_t batches, uint64_t seed) {
  check(o);
  const Sampler sampler(corpus, o);
  const MetaNet net = MetaNet::from(weights);
  std::mt19937_64 rng(seed);
  at::NoGradGuard no_grad;
  double sum = 0.0;
  for (int64_t b = 0; b < batches; ++b) sum += l1_loss(net, sampler.draw(rng)).item<double>();
  return batches > 0 ? sum / static_cast<double>(batches) : NAN;
}

void save_wnn_plus(const std::string& path, const std::map<std::string, at::Tensor>& weights,
                   const std::map<std::string, std::string>& metadata) {
  const MetaNet net = MetaNet::from(weights);  // checks every name is there
  NamedTensors out;
  for (const auto& [name, t] : net.named()) out.emplace_back(name, t.detach().contiguous());
  save_safetensors(path, out, metadata);
}

}  // namespace ht
