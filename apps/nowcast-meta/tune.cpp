// The runs of loss-aware tuning: a corpus task trained with every interval's whole state kept
// (a medium GPT: ~2.5 MB a state), probed on its own validation batches.
#include "tune.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <torch/torch.h>

#include "hybrid/core/grad_clip.h"
#include "task_run.h"

namespace ht::meta {

void with_recorded_run(const CorpusTask& task, const std::string& fashion_mnist_dir, const std::string& text_path,
                       int64_t probes, const std::function<void(const LossTuneRun&)>& use,
                       const std::vector<int64_t>& average_half_lives) {
  const auto run = open_task(task, fashion_mnist_dir, text_path, probes);
  LossTuneRun r;
  r.spec = run->spec;
  r.params = run->optimizer->parameters();
  r.interval = task.interval;
  r.probes = std::min(probes, run->session.data->num_val_batches());  // a small text may hold fewer
  std::vector<std::string> optimizer_states;  // serialised, one per recorded state
  std::vector<DataCursor> cursors;            // the training stream where each state was recorded
  std::map<int64_t, std::vector<at::Tensor>> average;  // by half-life: the running averages [P]
  for (const int64_t h : average_half_lives) {
    at::NoGradGuard no_grad;
    for (const auto& p : r.params) average[h].push_back(p.detach().to(at::kFloat).clone());
  }
  while (run->trainer->step() < task.steps()) {
    run->trainer->train_step();
    at::NoGradGuard no_grad;
    for (auto& [h, avg] : average) {
      const double keep = std::pow(0.5, 1.0 / static_cast<double>(h));
      for (size_t i = 0; i < avg.size(); ++i) avg[i].mul_(keep).add_(r.params[i].detach().to(at::kFloat), 1 - keep);
    }
    if (run->trainer->step() % task.interval == 0) {
      std::vector<at::Tensor> state;
      for (const auto& p : r.params) state.push_back(p.detach().to(at::kFloat).clone());
      r.states.push_back(std::move(state));
      for (const auto& [h, avg] : average) {
        std::vector<at::Tensor> copy;
        for (const auto& a : avg) copy.push_back(a.clone());
        r.averages[h].push_back(std::move(copy));
      }
      torch::serialize::OutputArchive archive;
      run->optimizer->save(archive);
      std::ostringstream bytes;
      archive.save_to(bytes);
      optimizer_states.push_back(bytes.str());
      cursors.push_back(run->session.data->cursor());
    }
  }
  Objective& objective = *run->objective;
  DataSource& data = *run->session.data;
  Optimizer& optimizer = *run->optimizer;
  r.probe_loss = [&objective, &data](int64_t probe) { return objective.loss(data.val_batch(probe)); };
  // From state t the optimizer goes on as the run did there: its moments and step count, the
  // schedule's rate at that step, and the batches from `cursor` on.
  const auto train_from = [&, interval = task.interval, clip = run->trainer->options().grad_clip](
                              int64_t t, const DataCursor& cursor, int64_t steps, const std::function<void(int64_t)>& after) {
    data.restore(cursor);
    torch::serialize::InputArchive archive;
    std::istringstream bytes(optimizer_states.at(static_cast<size_t>(t)));
    archive.load_from(bytes);
    optimizer.load(archive);
    const int64_t first = (t + 1) * interval;
    for (int64_t s = 0; s < steps; ++s) {
      optimizer.schedule_lr([&](double base) { return run->schedule.at(base, first + s); });
      optimizer.zero_grad();
      objective.loss(data.next_train_batch()).backward();
      if (clip > 0) clip_grads_to_norm(r.params, global_grad_norm(r.params), clip);  // as the trainer clips
      optimizer.step();
      if (after) after(s + 1);
    }
    optimizer.zero_grad();
  };
  // The run's own next batches: the same ones for a jump and for no jump (common random numbers:
  // their difference is the jump's, not the batches').
  r.recover = [&](int64_t t, int64_t steps) { train_from(t, cursors.at(static_cast<size_t>(t)), steps, nullptr); };
  r.explore = [&](int64_t t, int64_t draw, int64_t steps, const std::function<void(int64_t)>& after) {
    if (draw < 1) throw NowcastError("explore: draw must be >= 1 (draw 0 would be the run's own batches)");
    write_state(r, t);
    DataCursor other = cursors.at(static_cast<size_t>(t));
    other.epoch += 1000 * draw;  // no run here lasts 1000 epochs: batches neither the run nor recover reads
    other.position = 0;
    train_from(t, other, steps, after);
  };
  use(r);
}

HeldOutScore score_held_out(const LossTuner& start, const LossTuner& tuned, const LossTuneRun& run,
                            const std::string& task) {
  HeldOutScore s;
  const auto T = static_cast<int64_t>(run.states.size());
  int64_t n = 0;
  for (const int64_t t : {T / 2, T - 1}) {
    if (t < kNowcastContext - 1) continue;
    for (const int64_t k : {1, 5, 10, 20, 40}) {
      double a = 0, b = 0, now = 0;
      for (int64_t probe = 0; probe < run.probes; ++probe) {
        const LossTuneStep x = start.score(run, t, k, probe), y = tuned.score(run, t, k, probe);
        now += x.loss_now / run.probes, a += x.loss_pred / run.probes, b += y.loss_pred / run.probes;
      }
      s.ratio_start += a / now, s.ratio_tuned += b / now, ++n;
      s.table += fmt::format("| {} | {} | {} | {:.4f} | {:.4f} | {:.4f} |\n", task, t + 1, k, now, a, b);
    }
  }
  if (n) s.ratio_start /= n, s.ratio_tuned /= n;
  return s;
}

}  // namespace ht::meta
