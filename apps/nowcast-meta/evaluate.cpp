// The offline evaluation: one training run of an unseen task with every interval's full weights
// kept, then at each jump point the three predictions scored against the real future weights.
#include "evaluate.h"

#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "hybrid-train/session.h"
#include "hybrid/core/trainer.h"
#include "hybrid/hybrid/nowcaster_registry.h"

namespace ht::meta {
namespace {

cli::Config task_config(const EvalTask& task, int64_t steps, const std::string& fashion_mnist_dir) {
  cli::Config c;
  auto set = [&](const std::string& kv) { c.set_override(kv); };
  if (task.name == "fm16") {
    for (const std::string kv : {"data.dataset=fashion-mnist", "model.kind=fm16", "data.batch_size=128",
                                 "optim.beta2=0.999", "optim.weight_decay=0", "optim.lr=0.006"})
      set(kv);
    set("data.fashion_mnist_dir=" + fashion_mnist_dir);
  } else if (task.name == "gpt-tiny-kjv") {
    for (const std::string kv : {"data.dataset=kjv", "model.kind=gpt", "model.preset=tiny", "data.batch_size=16",
                                 "data.context=128", "optim.beta2=0.95", "optim.lr=0.003"})
      set(kv);
  } else {
    throw std::invalid_argument("unknown evaluation task '" + task.name + "' (fm16, gpt-tiny-kjv)");
  }
  for (const std::string kv : {"schedule.kind=constant", "schedule.warmup_steps=0", "run.seed=1"}) set(kv);
  set("data.val_batches=" + std::to_string(task.val_batches));
  set("train.steps=" + std::to_string(steps));
  return c;
}

// Mean over tensors of mean((a - b)^2) / std^2 (std: the tensor's over the 5 context states);
// tensors that did not move over the context (std < 1e-7) are left out.
double nmse(const std::vector<at::Tensor>& pred, const std::vector<at::Tensor>& truth, const std::vector<double>& stds) {
  double sum = 0.0;
  int64_t n = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    if (!(stds[i] > 1e-7)) continue;
    sum += (pred[i] - truth[i]).to(at::kDouble).pow(2).mean().item<double>() / (stds[i] * stds[i]);
    ++n;
  }
  return n ? sum / static_cast<double>(n) : NAN;
}

}  // namespace

std::vector<EvalRow> evaluate_task(const EvalTask& task, const std::string& own_weights, const std::string& wnn_weights,
                                   const std::string& fashion_mnist_dir,
                                   const std::function<void(const std::string&)>& progress) {
  const int64_t steps = task.interval * task.states;
  const cli::Config c = task_config(task, steps, fashion_mnist_dir);
  cli::Session s = cli::build_session(c, true);
  TrainerOptions options = cli::trainer_options(c);
  options.checkpoint.dir.clear();
  Trainer trainer(*s.objective, *s.optimizer, *s.data, options);
  const std::vector<at::Tensor> params = s.optimizer->parameters();
  std::vector<std::vector<at::Tensor>> states;  // [state][parameter], after (j + 1) x interval steps
  torch::NoGradGuard no_grad;
  while (trainer.step() < steps) {
    {
      at::AutoGradMode grad(true);
      trainer.train_step();
    }
    if (trainer.step() % task.interval == 0) {
      std::vector<at::Tensor> copy;
      for (const auto& p : params) copy.push_back(p.detach().clone());
      states.push_back(std::move(copy));
      if (states.size() % 5 == 0) progress(fmt::format("{}: {} of {} steps", task.name, trainer.step(), steps));
    }
  }
  const NamedShapes shapes = named_shapes(s.objective->module());
  const NowcastSpec spec = s.architecture == "gpt2" ? nowcast_spec_gpt2(shapes, s.n_head) : nowcast_spec_feedforward(shapes);
  auto own = find_nowcaster("own").load(own_weights, spec, {});
  auto wnn = find_nowcaster("wnn").load(wnn_weights, spec, {});
  std::vector<at::Tensor> saved;
  for (const auto& p : params) saved.push_back(p.detach().clone());
  auto loss_at = [&](const std::vector<at::Tensor>& w) {
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(w[i]);
    return trainer.evaluate().val_loss;
  };
  std::vector<EvalRow> rows;
  const auto T = static_cast<int64_t>(states.size());
  for (const int64_t t : task.jump_at) {
    if (t < 4 || t >= T - 1) continue;
    std::vector<std::vector<at::Tensor>> context(params.size());
    std::vector<double> stds;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<at::Tensor> flat;
      for (int64_t u = t - 4; u <= t; ++u) {
        context[i].push_back(states[u][i]);
        flat.push_back(states[u][i].reshape(-1));
      }
      stds.push_back(at::cat(flat).to(at::kDouble).std().item<double>());
    }
    const double loss_now = loss_at(states[t]);
    for (const int64_t k : task.horizons) {
      if (t + k >= T) continue;
      EvalRow r;
      r.task = task.name;
      r.step = (t + 1) * task.interval;
      r.k = k;
      const auto p_own = own->predict(context, k);
      const auto p_wnn = wnn->predict(context, k);
      const auto& truth = states[t + k];
      r.nmse_none = nmse(states[t], truth, stds);
      r.nmse_wnn = nmse(p_wnn, truth, stds);
      r.nmse_own = nmse(p_own, truth, stds);
      r.loss_now = r.loss_none = loss_now;
      r.loss_wnn = loss_at(p_wnn);
      r.loss_own = loss_at(p_own);
      r.loss_true = loss_at(truth);
      rows.push_back(r);
      progress(fmt::format("{}: step {} k {} done", task.name, r.step, k));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
  return rows;
}

}  // namespace ht::meta
