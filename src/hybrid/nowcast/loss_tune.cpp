// Loss-aware tuning of a WNN+-shaped nowcaster: its jump is scored by the task's loss at the
// predicted weights, and that loss's gradient is chained into the nowcaster (plus L1 to the future).
#include <algorithm>
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
constexpr int64_t kChunk = 65536;  // rows per no-grad forward: bounds the [rows, hidden] activations

// Per-scalar parameter kinds as WNN+ embeds them: [numel] int64 (GPT-2's fused q|k|v: 7/8/9 by column).
at::Tensor scalar_kinds(const NowcastParam& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  if (p.kind == ParamKind::kAttnQKV) {
    const int64_t width = p.shape.at(1);
    return at::div(at::remainder(at::arange(n, at::kLong), width), width / 3, "floor") +
           static_cast<int>(ParamKind::kAttnQuery);
  }
  return at::full({n}, static_cast<int>(p.kind), at::kLong);
}

// One tensor's context t-4..t: the flattened states and their scale (as a jump computes them).
struct Context {
  std::vector<at::Tensor> flat;  // 5 x [n]
  nowcast::TensorScale scale;
  bool moving() const { return scale.std > 1e-7 && std::isfinite(scale.std); }
};

Context context_of(const LossTuneRun& run, size_t i, int64_t t) {
  Context c;
  for (int64_t u = t - kCtx + 1; u <= t; ++u) c.flat.push_back(run.states[u][i].reshape(-1));
  c.scale = nowcast::tensor_scale(c.flat, kChunk);
  return c;
}

void check_run(const LossTuneRun& run, int64_t recover_steps) {
  const auto T = static_cast<int64_t>(run.states.size());
  if (T < kCtx) throw NowcastError("loss-aware tuning: a run needs >= 5 recorded states, got " + std::to_string(T));
  if (run.params.size() != run.spec.params.size() || run.states.front().size() != run.params.size())
    throw NowcastError("loss-aware tuning: the run's spec, parameters and states disagree in count");
  if (!run.probe_loss || run.probes < 1) throw NowcastError("loss-aware tuning: the run has no probe loss");
  if (recover_steps > 0 && !run.recover)
    throw NowcastError("loss-aware tuning: recover_steps > 0 but the run cannot train on from a state");
}

std::vector<at::Tensor> kinds_of(const NowcastSpec& spec) {
  std::vector<at::Tensor> kinds;
  for (const auto& p : spec.params) kinds.push_back(scalar_kinds(p));
  return kinds;
}

std::vector<Context> contexts_of(const LossTuneRun& run, int64_t t) {
  std::vector<Context> contexts;
  for (size_t i = 0; i < run.params.size(); ++i) contexts.push_back(context_of(run, i, t));
  return contexts;
}

}  // namespace

struct LossTuner::Impl {
  LossTuneOptions o;
  nowcast::MetaNet net;
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> opt;
  std::mt19937_64 rng;
  at::Generator gen;  // the scalar subsets

  // The whole prediction at horizon k for every tensor, written into run.params (no grad).
  void predict_into(const LossTuneRun& run, const std::vector<at::Tensor>& kinds, const std::vector<Context>& contexts,
                    int64_t k) const {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < run.params.size(); ++i) {
      const Context& c = contexts[i];
      const int64_t n = c.flat.front().numel();
      at::Tensor out = run.params[i].detach().view(-1);
      for (int64_t a = 0; a < n; a += kChunk) {
        const int64_t m = std::min(kChunk, n - a);
        const at::Tensor x = nowcast::normalised_rows(c.flat, a, m, c.scale);  // [m, 5]
        const at::Tensor pred = net.forward(x, kinds[i].narrow(0, a, m)).select(1, k - 1);  // [m]
        out.narrow(0, a, m).copy_(pred.to(at::kDouble) * c.scale.std + c.scale.mean);
      }
    }
  }

  void recover(const LossTuneRun& run, int64_t t) const {
    if (o.recover_steps <= 0) return;
    at::AutoGradMode grad(true);
    run.recover(t, o.recover_steps);
  }

  double loss_at_current(const LossTuneRun& run, int64_t probe) const {
    at::NoGradGuard no_grad;
    return run.probe_loss(probe).item<double>();
  }
};

LossTuner::LossTuner(const std::map<std::string, at::Tensor>& start, LossTuneOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (options.steps_per_run < 1 || options.grad_scalars < 1 || !(options.lr > 0.0) || !(options.loss_weight >= 0.0) ||
      !(options.l1_weight >= 0.0) || !(options.grad_clip >= 0.0))
    throw NowcastError("LossTuneOptions: steps_per_run, grad_scalars >= 1, lr > 0, weights and grad_clip >= 0 required");
  impl_->o = options;
  std::map<std::string, at::Tensor> own;  // a copy: tuning must not move the caller's tensors
  for (const auto& [name, t] : start) own[name] = t.detach().to(at::kFloat).clone();
  impl_->net = nowcast::MetaNet::from(own);
  impl_->params = impl_->net.all();  // handles of the net's own tensors, made the trained leaves
  for (auto& p : impl_->params) p.set_requires_grad(true);
  impl_->opt = std::make_unique<torch::optim::AdamW>(
      impl_->params, torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
  impl_->rng.seed(options.seed);
  impl_->gen = at::detail::createCPUGenerator(options.seed + 1);
}

LossTuner::~LossTuner() = default;

LossTuneStep LossTuner::score(const LossTuneRun& run, int64_t t, int64_t k, int64_t probe) const {
  check_run(run, impl_->o.recover_steps);
  LossTuneStep r;
  r.t = t, r.k = k;
  write_state(run, t);
  impl_->recover(run, t);  // no jump, the same optimizer steps: the fair comparison
  r.loss_now = impl_->loss_at_current(run, probe);
  impl_->predict_into(run, kinds_of(run.spec), contexts_of(run, t), k);
  impl_->recover(run, t);
  r.loss_pred = impl_->loss_at_current(run, probe);
  write_state(run, static_cast<int64_t>(run.states.size()) - 1);
  return r;
}

std::vector<at::Tensor> predict_from_state(const LossTuneRun& run, NowcastModel& model, int64_t t, int64_t k) {
  check_run(run, 0);
  if (t < kCtx - 1 || t >= static_cast<int64_t>(run.states.size()) || k < 1 || k > model.max_horizon())
    throw NowcastError("predict_from_state: state " + std::to_string(t) + " or horizon " + std::to_string(k) +
                       " out of range (t >= 4 within the run, 1 <= k <= the model's " +
                       std::to_string(model.max_horizon()) + " horizons)");
  if (model.spec().params.size() != run.params.size())
    throw NowcastError("predict_from_state: the nowcaster was built for " + std::to_string(model.spec().params.size()) +
                       " parameters, the run has " + std::to_string(run.params.size()) + ": build it on run.spec");
  std::vector<std::vector<at::Tensor>> context(run.params.size());  // [P][5]: states t-4 .. t
  for (size_t i = 0; i < run.params.size(); ++i)
    for (int64_t j = t - (kCtx - 1); j <= t; ++j) context[i].push_back(run.states[j][i]);
  return model.predict(context, k);
}

void write_jump(const LossTuneRun& run, int64_t t, const std::vector<at::Tensor>& predicted, double scale,
                const JumpKinds& kinds) {
  if (predicted.size() != run.params.size())
    throw NowcastError("write_jump: " + std::to_string(predicted.size()) + " predicted tensors for " +
                       std::to_string(run.params.size()) + " parameters");
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < run.params.size(); ++i) {
    const at::Tensor& last = run.states.at(t)[i];
    if (kinds.moves(run.spec.params[i].kind))
      run.params[i].detach().copy_(last + (predicted[i] - last) * scale);
    else
      run.params[i].detach().copy_(last);
  }
}

void write_state(const LossTuneRun& run, int64_t t) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < run.params.size(); ++i) run.params[i].detach().copy_(run.states.at(t)[i]);
}

std::vector<LossTuneStep> LossTuner::tune(const LossTuneRun& run, const std::function<void(const LossTuneStep&)>& progress) {
  const auto T = static_cast<int64_t>(run.states.size());
  const int64_t H = impl_->net.w_out.size(0);
  check_run(run, impl_->o.recover_steps);
  Impl& m = *impl_;
  const std::vector<at::Tensor> kinds = kinds_of(run.spec);
  std::vector<LossTuneStep> steps;
  for (int64_t s = 0; s < m.o.steps_per_run; ++s) {
    LossTuneStep r;
    r.t = std::uniform_int_distribution<int64_t>(kCtx - 1, T - 1)(m.rng);
    r.k = std::uniform_int_distribution<int64_t>(1, H)(m.rng);
    const int64_t probe = std::uniform_int_distribution<int64_t>(0, run.probes - 1)(m.rng);
    write_state(run, r.t);
    r.loss_now = m.loss_at_current(run, probe);
    // dL/dw at the predicted weights: the model's own backward, on its own parameters.
    const std::vector<Context> contexts = contexts_of(run, r.t);  // once: the jump and the gradient
    m.predict_into(run, kinds, contexts, r.k);
    m.recover(run, r.t);
    for (const auto& p : run.params) p.mutable_grad() = at::Tensor();
    {
      at::AutoGradMode grad(true);
      const at::Tensor loss = run.probe_loss(probe);
      r.loss_pred = loss.item<double>();
      loss.backward();
    }
    m.opt->zero_grad();
    const int64_t ahead = std::min(H, T - 1 - r.t);  // recorded futures t+1 .. t+ahead
    double l1_sum = 0.0;
    int64_t l1_count = 0, moving = 0;
    for (const auto& c : contexts) moving += c.moving();
    const bool use_loss = m.o.loss_weight > 0.0 && std::isfinite(r.loss_pred) && r.loss_now > 0.0;
    for (size_t i = 0; i < run.params.size(); ++i) {
      const Context& c = contexts[i];
      if (!c.moving()) continue;
      const int64_t n = c.flat.front().numel(), S = std::min(m.o.grad_scalars, n);
      const at::Tensor idx = S == n ? at::arange(n, at::kLong)
                                    : at::randperm(n, m.gen, at::TensorOptions(at::kLong)).narrow(0, 0, S);
      std::vector<at::Tensor> cols;
      for (const auto& f : c.flat) cols.push_back(f.index_select(0, idx));
      const at::Tensor x = (at::stack(cols, 1) - c.scale.mean) / (c.scale.std + nowcast::kNormEps);  // [S, 5]
      const at::Tensor out = m.net.forward(x, kinds[i].index_select(0, idx));  // [S, H] normalised
      at::Tensor objective = at::zeros({}, at::kFloat);
      const at::Tensor g = run.params[i].grad();
      if (use_loss && g.defined()) {
        // d(loss ratio)/d(prediction) = g / loss_now; the sum over S scalars scaled up to all n.
        const at::Tensor g_sub = g.reshape(-1).index_select(0, idx) * (c.scale.std / r.loss_now);
        objective = objective + (out.select(1, r.k - 1) * g_sub).sum() * (m.o.loss_weight * n / S);
      }
      if (ahead > 0 && m.o.l1_weight > 0.0) {
        std::vector<at::Tensor> fut;
        for (int64_t j = 1; j <= ahead; ++j) fut.push_back(run.states[r.t + j][i].reshape(-1).index_select(0, idx));
        const at::Tensor y = (at::stack(fut, 1) - c.scale.mean) / (c.scale.std + nowcast::kNormEps);  // [S, ahead]
        const at::Tensor l1 = (out.narrow(1, 0, ahead) - y).abs().mean();
        l1_sum += l1.item<double>();
        ++l1_count;
        objective = objective + l1 * (m.o.l1_weight / static_cast<double>(moving));
      }
      if (objective.requires_grad()) objective.backward();
    }
    if (l1_count) r.l1 = l1_sum / static_cast<double>(l1_count);
    if (m.o.grad_clip > 0.0) torch::nn::utils::clip_grad_norm_(m.params, m.o.grad_clip);
    m.opt->step();
    steps.push_back(r);
    if (progress) progress(r);
  }
  for (const auto& p : run.params) p.mutable_grad() = at::Tensor();
  write_state(run, T - 1);
  return steps;
}

std::map<std::string, at::Tensor> LossTuner::weights() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : impl_->net.named()) out[name] = t.detach().clone();
  return out;
}

std::map<std::string, at::Tensor> read_wnn_plus(const std::string& path) {
  std::map<std::string, at::Tensor> weights;
  for (auto& [name, t] : load_safetensors(path)) weights[name] = t.to(at::kFloat);
  try {
    nowcast::MetaNet::from(weights);  // every name there
  } catch (const NowcastError& e) {
    throw NowcastError("'" + path + "' is not a WNN+ weights file (" + e.what() +
                       "); start from models/nino/nino_mlp.safetensors or one of models/own/*.safetensors");
  }
  return weights;
}

}  // namespace ht
