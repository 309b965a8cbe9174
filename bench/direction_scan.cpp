// How much can a predicted step lower the loss at all? At points of a plain run, each predictor
// sees the last 64 steps (as in a hybrid Full phase), then its predicted steps are applied to a
// copy of the weights and the validation loss measured, against the real steps that follow.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include "bench_tasks.h"
#include "hybrid-train/session.h"
#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor.h"

namespace {

// Horizons at which the loss is read; the largest is the longest predict phase scanned.
const std::vector<int64_t> kHorizons = {1, 2, 4, 8, 16, 32};

struct Series {
  std::string name;   // predictor name, or "real"
  double scale;       // predicted step = scale x the predictor's update (real: 1)
  std::map<int64_t, double> delta;  // horizon -> val loss there minus val loss at the point
};

// One predictor fed the recorded stretch the way HybridStrategy feeds it.
struct Watcher {
  std::unique_ptr<ht::UpdatePredictor> predictor;
  bool updates() const { return predictor->input() == ht::UpdatePredictor::Input::Updates; }
};

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

void copy_into(std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> tasks = {"mlp", "gpt"};
  std::vector<std::string> predictors = {"mean", "regression", "drift", "last", "ema", "dmd"};
  std::vector<double> scales = {0.25, 1.0};
  int64_t seeds = 2, points = 5, record = 64, mlp_steps = 940, gpt_steps = 600, cnn_steps = 470;
  int64_t mlp_val_batches = 40, gpt_val_batches = 24, eval_points = 20;
  double ema_decay = 0.97;
  std::string out_dir = "bench/results";
  CLI::App app{"validation loss after predicted steps of each predictor vs after real steps, along plain runs"};
  app.add_option("--tasks", tasks, "mlp gpt cnn");
  app.add_option("--predictors", predictors, "mean regression drift last ema dmd rssm");
  app.add_option("--scales", scales, "multipliers of each predicted update");
  app.add_option("--seeds", seeds);
  app.add_option("--points", points, "scan points per run, evenly spaced");
  app.add_option("--record", record, "recorded steps before each point (hybrid.full_steps)");
  app.add_option("--mlp-steps", mlp_steps);
  app.add_option("--gpt-steps", gpt_steps);
  app.add_option("--cnn-steps", cnn_steps);
  app.add_option("--mlp-val-batches", mlp_val_batches, "validation batches of 128 images (MLP, CNN)");
  app.add_option("--gpt-val-batches", gpt_val_batches, "validation batches of 16 x 128 tokens (GPT)");
  app.add_option("--ema", ema_decay, "decay of the weight average evaluated alongside the run");
  app.add_option("--eval-points", eval_points, "evaluations of the run and its weight average");
  app.add_option("--out", out_dir);
  CLI11_PARSE(app, argc, argv);
  try {
    for (const auto& t : tasks)
      if (!known_task(t)) throw std::invalid_argument("unknown task '" + t + "' in --tasks (use mlp, gpt, cnn)");
    for (const auto& p : predictors) {
      ht::HybridOptions o;  // as the scan feeds each predictor: `record` steps per stretch
      o.predictor = p;
      o.full_steps = record;
      ht::make_update_predictor(o);  // validates the options
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "direction_scan: %s\n", e.what());
    return 2;
  }

  ht::install_tracking_allocator();
  ht::set_threads(2);
  std::ofstream csv(out_dir + "/direction_scan.csv");
  csv << "task,seed,step,series,scale";
  for (int64_t h : kHorizons) csv << ",dval_h" << h;
  csv << "\n";
  std::ofstream curves_csv(out_dir + "/direction_scan_curves.csv");
  curves_csv << "task,seed,step,val_loss,val_loss_weight_average\n";

  for (const auto& task : tasks) {
    const int64_t steps = task == "gpt" ? gpt_steps : task == "mlp" ? mlp_steps : cnn_steps;
    const int64_t horizon = kHorizons.back();
    // Points evenly spaced, each after a full recorded stretch and with room for the real steps.
    std::vector<int64_t> at;
    for (int64_t i = 1; i <= points; ++i) at.push_back(record + (steps - record - horizon) * i / (points + 1));
    // Per predictor and scale: the best (lowest) delta of each point, and the real steps' deltas.
    std::map<std::string, std::vector<double>> best;
    std::map<int64_t, std::vector<double>> real_at;
    std::map<std::string, std::vector<double>> first;  // change after the first predicted step
    std::map<std::string, int64_t> lowered, continued;
    std::vector<double> avg_step_ratio;  // plain's steps to its 80 % loss / its weight average's

    for (int64_t seed = 1; seed <= seeds; ++seed) {
      ht::cli::Config c = task_config(task, steps);
      c.set_override("run.seed=" + std::to_string(seed));
      c.set_override("data.val_batches=" + std::to_string(task == "gpt" ? gpt_val_batches : mlp_val_batches));
      ht::cli::Session session = ht::cli::build_session(c, true);
      ht::TrainerOptions o = ht::cli::trainer_options(c);
      o.checkpoint.dir.clear();
      ht::Trainer trainer(*session.objective, *session.optimizer, *session.data, o);
      std::vector<at::Tensor> params = trainer.optimizer().parameters();
      std::vector<at::Tensor> state = params;  // what a rollback restores: + floating buffers
      for (const auto& b : trainer.objective().module().buffers())
        if (b.is_floating_point()) state.push_back(b);
      const std::vector<int64_t> group = ht::layer_groups(static_cast<int64_t>(params.size()), 4);

      std::vector<Watcher> watchers;
      auto fresh_watchers = [&] {
        watchers.clear();
        for (const auto& p : predictors) {
          ht::HybridOptions ho;
          ho.predictor = p;
          ho.full_steps = record;  // as checked up front
          watchers.push_back({ht::make_update_predictor(ho)});
        }
      };
      std::vector<at::Tensor> before = clones(params), delta = clones(params), out = clones(params);
      // The run's exponential weight average, evaluated at the same points as the run: what
      // averaging the trajectory - the one move along it that lowers the loss - is worth.
      std::vector<at::Tensor> average = clones(params);
      const int64_t eval_every = std::max<int64_t>(1, steps / eval_points);
      std::vector<std::pair<int64_t, double>> curve, avg_curve;
      double loss_ema = NAN;

      size_t next = 0;
      double val0 = NAN;
      Series real{"real", 1.0, {}};
      for (int64_t t = 0; t < steps; ++t) {
        const bool recording = next < at.size() && t >= at[next] - record && t < at[next];
        if (recording && t == at[next] - record) fresh_watchers();
        if (recording) copy_into(before, params);
        const ht::StepRecord rec = trainer.train_step();
        loss_ema = std::isnan(loss_ema) ? rec.loss : 0.9 * loss_ema + 0.1 * rec.loss;
        {
          torch::NoGradGuard no_grad;
          for (size_t i = 0; i < params.size(); ++i) average[i].lerp_(params[i], 1.0 - ema_decay);
        }
        if (trainer.step() % eval_every == 0 || trainer.step() == steps) {
          curve.emplace_back(trainer.step(), trainer.evaluate().val_loss);
          const std::vector<at::Tensor> current = clones(params);
          copy_into(params, average);
          avg_curve.emplace_back(trainer.step(), trainer.evaluate().val_loss);
          copy_into(params, current);
        }
        if (recording) {
          torch::NoGradGuard no_grad;
          for (size_t i = 0; i < params.size(); ++i) at::sub_out(delta[i], params[i], before[i]);
          ht::TrainingFeatures f;
          f.step = trainer.step();
          f.progress = static_cast<double>(trainer.step()) / static_cast<double>(steps);
          f.lr = rec.lr;
          f.loss = rec.loss;
          f.loss_ema = loss_ema;
          f.grad_norm = rec.grad_norm;
          std::vector<double> sq(4, 0.0);
          for (size_t i = 0; i < delta.size(); ++i) sq[static_cast<size_t>(group[i])] += delta[i].square().sum().item<double>();
          for (double& s : sq) s = std::sqrt(s);
          f.group_update_norms = sq;
          for (auto& w : watchers) {
            if (w.updates()) w.predictor->observe(delta, f);
            else w.predictor->observe_weights(params, f);
          }
        }
        // The real steps after a point: the run itself, which continues undisturbed.
        if (!std::isnan(val0)) {
          const int64_t k = trainer.step() - at[next - 1];
          if (std::find(kHorizons.begin(), kHorizons.end(), k) != kHorizons.end())
            real.delta[k] = trainer.evaluate().val_loss - val0;
          if (k == horizon) {
            for (int64_t h : kHorizons) real_at[h].push_back(real.delta[h]);
            csv << fmt::format("{},{},{},real,1", task, seed, at[next - 1]);
            for (int64_t h : kHorizons) csv << fmt::format(",{:.6f}", real.delta[h]);
            csv << "\n";
            std::printf("  real steps          ");
            for (int64_t h : kHorizons) std::printf(" %+8.4f", real.delta[h]);
            std::printf("\n");
            val0 = NAN;
          }
        }
        if (next >= at.size() || trainer.step() != at[next]) continue;

        // The point: each predictor's predicted steps from the current weights, then restore.
        val0 = trainer.evaluate().val_loss;
        std::printf("%s seed %lld step %lld: val %.4f, lr %.2e; val loss change after h steps, h =",
                    task.c_str(), static_cast<long long>(seed), static_cast<long long>(trainer.step()), val0, rec.lr);
        for (int64_t h : kHorizons) std::printf(" %8lld", static_cast<long long>(h));
        std::printf("\n");
        const std::vector<at::Tensor> saved = clones(state);
        for (auto& w : watchers) {
          if (!w.updates()) w.predictor->end_stretch(params);
          if (!w.predictor->ready()) continue;
          for (double scale : scales) {
            Series s{w.predictor->name(), scale, {}};
            for (int64_t h = 1; h <= horizon; ++h) {
              {
                torch::NoGradGuard no_grad;
                if (w.updates()) {
                  w.predictor->predict_into(out, h, scale);
                  for (size_t i = 0; i < params.size(); ++i) params[i].add_(out[i]);
                } else {
                  w.predictor->add_prediction_to(params, h, scale);
                }
              }
              if (std::find(kHorizons.begin(), kHorizons.end(), h) != kHorizons.end())
                s.delta[h] = trainer.evaluate().val_loss - val0;
            }
            copy_into(state, saved);
            // The first step of a regression-type predictor moves onto its fitted line (an
            // average); whether continuing pays shows in the steps after it.
            double lowest = 0.0, lowest_after_first = s.delta[1];
            for (const auto& [h, d] : s.delta) {
              lowest = std::min(lowest, d);
              if (h > 1) lowest_after_first = std::min(lowest_after_first, d);
            }
            const std::string key = fmt::format("{} x{}", s.name, scale);
            best[key].push_back(lowest);
            first[key].push_back(s.delta[1]);
            if (lowest < 0.0) ++lowered[key];
            if (lowest_after_first < s.delta[1]) ++continued[key];
            csv << fmt::format("{},{},{},{},{}", task, seed, trainer.step(), s.name, scale);
            for (int64_t h : kHorizons) csv << fmt::format(",{:.6f}", s.delta[h]);
            csv << "\n";
            std::printf("  %-10s x%-5.2f     ", s.name.c_str(), scale);
            for (int64_t h : kHorizons) std::printf(" %+8.4f", s.delta[h]);
            std::printf("\n");
          }
        }
        std::fflush(stdout);
        real.delta.clear();
        ++next;
      }
      csv.flush();
      // Steps to plain's loss at the evaluation nearest 80 % of the budget, linearly interpolated.
      double target = curve.back().second;
      for (const auto& [st, v] : curve)
        if (st <= static_cast<int64_t>(0.8 * steps)) target = v;
      auto steps_to = [&](const std::vector<std::pair<int64_t, double>>& cv) -> double {
        for (size_t i = 1; i < cv.size(); ++i)
          if (cv[i].second <= target) {
            const auto [s0, v0] = cv[i - 1];
            const auto [s1, v1] = cv[i];
            return s0 + (v0 == v1 ? 1.0 : (v0 - target) / (v0 - v1)) * static_cast<double>(s1 - s0);
          }
        return NAN;
      };
      const double plain_steps = steps_to(curve), avg_steps = steps_to(avg_curve);
      avg_step_ratio.push_back(plain_steps / avg_steps);
      std::printf("%s seed %lld: target %.4f reached by the run at step %.0f, by its weight average (decay %.3g) at "
                  "step %.0f (%.2fx fewer steps); final val %.4f, average %.4f\n",
                  task.c_str(), static_cast<long long>(seed), target, plain_steps, ema_decay, avg_steps,
                  plain_steps / avg_steps, curve.back().second, avg_curve.back().second);
      for (size_t i = 0; i < curve.size(); ++i)
        curves_csv << fmt::format("{},{},{},{:.6f},{:.6f}\n", task, seed, curve[i].first, curve[i].second,
                                  avg_curve[i].second);
    }

    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? NAN : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    const size_t n = real_at[1].size();
    std::printf("== %s: over %zu points (%lld seeds), median val loss change\n", task.c_str(), n,
                static_cast<long long>(seeds));
    std::printf("==   real steps: ");
    for (int64_t h : kHorizons) std::printf(" h%lld %+.4f", static_cast<long long>(h), median(real_at[h]));
    std::printf("\n");
    std::printf("==   weight average (decay %.3g): %.2fx fewer steps to plain's 80 %% loss (median of %zu seeds)\n",
                ema_decay, median(avg_step_ratio), avg_step_ratio.size());
    for (const auto& [key, v] : best)
      std::printf("==   %-16s lowered the loss at some h in %2lld of %zu points, median best change %+.4f; first step "
                  "%+.4f; steps after the first lowered it further in %lld\n",
                  key.c_str(), static_cast<long long>(lowered[key]), v.size(), median(v), median(first[key]),
                  static_cast<long long>(continued[key]));
  }
  std::printf("raw: %s/direction_scan.csv\n", out_dir.c_str());
  return 0;
}
