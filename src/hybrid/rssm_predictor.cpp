// Predictor (c), "RSSM-lite": a learned dynamics model of the training state. Each ensemble member
// is a GRU (deterministic state h) plus a Gaussian latent z with a prior p(z|h) and a posterior
// q(z|h, o), decoding the next feature vector o (loss trend, noise, gradient and update norms per
// layer group, lr, and alpha_g = how much of the EMA update direction the next update carries).
// A prediction rolls the members forward from the recent window and applies alpha_g(k) * EMA per
// group; the spread across members is the predictor's self-confidence.
#include <torch/torch.h>

#include <cmath>
#include <deque>

#include "archive_io.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/hybrid/predictor.h"
#include "hybrid/hybrid/predictor_registry.h"

namespace ht {
namespace {

constexpr double kKlWeight = 0.1;
constexpr double kStatsDecay = 0.99;   // running mean / variance of the raw features
constexpr double kAlphaMax = 1.5;      // predicted multipliers are clamped to [0, kAlphaMax]

// All members in one set of batched weights: every op runs once for the whole ensemble.
// Shapes use E = members, F = features, H = hidden, Z = latent; activations are [E, 1, *].
struct RssmEnsemble : torch::nn::Module {
  RssmEnsemble(int64_t E, int64_t F, int64_t H, int64_t Z, at::Generator& gen) : H_(H), Z_(Z) {
    auto param = [&](const char* name, int64_t in, int64_t out) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      at::Tensor w = torch::empty({E, in, out});
      w.uniform_(-bound, bound, gen);
      return register_parameter(name, w);
    };
    auto bias = [&](const char* name, int64_t out) { return register_parameter(name, torch::zeros({E, 1, out})); };
    Wi = param("Wi", F + Z, 3 * H);  // [E, F+Z, 3H]
    Wh = param("Wh", H, 3 * H);      // [E, H, 3H]
    bi = bias("bi", 3 * H);
    bh = bias("bh", 3 * H);
    Wp = param("Wp", H, 2 * Z);      // prior head
    bp = bias("bp", 2 * Z);
    Wq = param("Wq", H + F, 2 * Z);  // posterior head
    bq = bias("bq", 2 * Z);
    Wd1 = param("Wd1", H + Z, H);    // decoder
    bd1 = bias("bd1", H);
    Wd2 = param("Wd2", H, F);
    bd2 = bias("bd2", F);
  }

  at::Tensor gru(const at::Tensor& h, const at::Tensor& x) {  // [E,1,H], [E,1,F+Z] -> [E,1,H]
    const auto gi = at::baddbmm(bi, x, Wi).chunk(3, -1);
    const auto gh = at::baddbmm(bh, h, Wh).chunk(3, -1);
    const at::Tensor r = torch::sigmoid(gi[0] + gh[0]);
    const at::Tensor u = torch::sigmoid(gi[1] + gh[1]);
    const at::Tensor n = torch::tanh(gi[2] + r * gh[2]);
    return n + u * (h - n);  // (1 - u) * n + u * h
  }

  std::pair<at::Tensor, at::Tensor> gaussian(const at::Tensor& in, const at::Tensor& W, const at::Tensor& b) {
    const auto ms = at::baddbmm(b, in, W).chunk(2, -1);
    return {ms[0], torch::nn::functional::softplus(ms[1]) + 0.01};  // mean, std: [E,1,Z]
  }
  std::pair<at::Tensor, at::Tensor> prior(const at::Tensor& h) { return gaussian(h, Wp, bp); }
  std::pair<at::Tensor, at::Tensor> posterior(const at::Tensor& h, const at::Tensor& o) {
    return gaussian(torch::cat({h, o}, -1), Wq, bq);
  }
  at::Tensor decode(const at::Tensor& h, const at::Tensor& z) {  // -> [E,1,F]
    const at::Tensor a = torch::elu(at::baddbmm(bd1, torch::cat({h, z}, -1), Wd1));
    return at::baddbmm(bd2, a, Wd2);
  }

  int64_t H_, Z_;
  at::Tensor Wi, Wh, bi, bh, Wp, bp, Wq, bq, Wd1, bd1, Wd2, bd2;
};

int64_t integer(const HybridOptions& o, const char* key) { return static_cast<int64_t>(o.predictor_option(key)); }

class RssmPredictor : public UpdatePredictor {
 public:
  explicit RssmPredictor(const HybridOptions& o)
      : E_(integer(o, "rssm_ensemble")), G_(o.groups), F_(6 + 2 * o.groups), H_(integer(o, "rssm_hidden")),
        Z_(integer(o, "rssm_latent")), W_(integer(o, "rssm_window")), train_every_(integer(o, "rssm_train_every")),
        beta_(o.predictor_option("ema_beta")), seed_(o.seed),
        gen_(at::detail::createCPUGenerator(o.seed)),
        model_(std::make_shared<RssmEnsemble>(E_, F_, H_, Z_, gen_)),
        opt_(model_->parameters(), torch::optim::AdamOptions(o.predictor_option("rssm_lr"))),
        mean_(static_cast<size_t>(F_), 0.0), var_(static_cast<size_t>(F_), 1.0) {}

  std::string name() const override { return "rssm"; }
  bool wants_group_norms() const override { return true; }

  void observe(const std::vector<at::Tensor>& deltas, const TrainingFeatures& f) override {
    torch::NoGradGuard no_grad;
    if (ema_.empty()) {
      for (const auto& d : deltas) ema_.push_back(torch::zeros_like(d, d.options().requires_grad(false)));
      group_ = layer_groups(static_cast<int64_t>(deltas.size()), G_);
    }
    // alpha_g: projection of this update on the EMA direction before it, per group.
    std::vector<double> dot(G_, 0.0), ee(G_, 0.0);
    if (ema_count_ > 0) {
      for (size_t i = 0; i < deltas.size(); ++i) {
        const auto g = static_cast<size_t>(group_[i]);
        dot[g] += at::dot(deltas[i].reshape({-1}), ema_[i].reshape({-1})).item<double>();
        ee[g] += at::dot(ema_[i].reshape({-1}), ema_[i].reshape({-1})).item<double>();
      }
    }
    for (size_t i = 0; i < deltas.size(); ++i) {
      if (ema_count_ == 0) ema_[i].copy_(deltas[i]);
      else ema_[i].mul_(beta_).add_(deltas[i], 1.0 - beta_);
    }
    ++ema_count_;

    std::vector<double> raw(static_cast<size_t>(F_), 0.0);
    const double logloss = std::log(std::max(f.loss, 1e-12));
    raw[0] = logloss;
    raw[1] = history_.empty() ? 0.0 : logloss - history_.back()[0];
    raw[2] = std::log(f.loss_var + 1e-12) - 2.0 * std::log(std::max(f.loss_ema, 1e-12));
    raw[3] = std::log(std::max(f.grad_norm, 1e-12));
    raw[4] = std::log(std::max(f.lr, 1e-12));
    raw[5] = f.progress;
    for (int64_t g = 0; g < G_; ++g) {
      const double n = g < static_cast<int64_t>(f.group_update_norms.size()) ? f.group_update_norms[g] : 0.0;
      raw[6 + g] = std::log(std::max(n, 1e-20));
      const double prev_alpha = history_.empty() ? 1.0 : history_.back()[6 + G_ + g];
      raw[6 + G_ + g] = ee[g] > 0.0 ? dot[g] / ee[g] : prev_alpha;
    }
    for (double& x : raw) if (!std::isfinite(x)) x = 0.0;
    update_stats(raw);
    history_.push_back(raw);
    while (static_cast<int64_t>(history_.size()) > W_) history_.pop_front();
    ++observations_;
    rollout_.clear();
    if (observations_ % train_every_ == 0 && history_.size() >= 4) train();
  }

  void reset_history() override { ema_count_ = 0; rollout_.clear(); }
  bool ready() const override { return ema_count_ > 0 && updates_ > 0; }

  void predict_into(std::vector<at::Tensor>& out, int64_t steps_ahead, double scale) override {
    if (!ready()) throw std::logic_error("rssm predictor: predict_into before the model was trained");
    roll_out(steps_ahead);
    const std::vector<double>& alpha = rollout_[steps_ahead - 1].alpha;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < out.size(); ++i) at::mul_out(out[i], ema_[i], alpha[group_[i]] * scale);
  }

  double predicted_loss_change(int64_t steps_ahead) override {
    if (!ready()) return NAN;
    roll_out(steps_ahead);
    double s = 0.0;
    for (int64_t k = 0; k < steps_ahead; ++k) s += rollout_[k].dlogloss;
    return std::exp(s) - 1.0;
  }

  double self_confidence() const override {
    if (!ready()) return 0.0;
    const_cast<RssmPredictor*>(this)->roll_out(1);
    return 1.0 / (1.0 + rollout_[0].spread / 0.25);
  }

  int64_t state_bytes() const override {
    int64_t b = 0;
    for (const auto& t : ema_) b += t.numel() * static_cast<int64_t>(t.element_size());
    for (const auto& p : model_->parameters()) b += 3 * p.numel() * static_cast<int64_t>(p.element_size());
    return b;  // EMA direction + model weights and their two Adam moments
  }

  void save(torch::serialize::OutputArchive& a) const override {
    using archive_io::put;
    put(a, "ema_count", ema_count_);
    put(a, "observations", observations_);
    put(a, "updates", updates_);
    archive_io::put_tensors(a, "ema", ema_);
    put(a, "mean", mean_);
    put(a, "var", var_);
    std::vector<double> flat;
    for (const auto& row : history_) flat.insert(flat.end(), row.begin(), row.end());
    put(a, "history", flat);
    a.write("gen_state", gen_.get_state(), true);
    torch::serialize::OutputArchive m(a.compilation_unit()), o(a.compilation_unit());
    model_->save(m);
    opt_.save(o);
    a.write("model", m);
    a.write("adam", o);
  }

  void load(torch::serialize::InputArchive& a) override {
    using namespace archive_io;
    ema_count_ = get_int(a, "ema_count");
    observations_ = get_int(a, "observations");
    updates_ = get_int(a, "updates");
    get_tensors_into(a, "ema", ema_);
    if (group_.empty() && !ema_.empty()) group_ = layer_groups(static_cast<int64_t>(ema_.size()), G_);
    mean_ = get_doubles(a, "mean");
    var_ = get_doubles(a, "var");
    if (static_cast<int64_t>(mean_.size()) != F_) {
      throw std::runtime_error("rssm state has " + std::to_string(mean_.size()) + " features, options give " +
                               std::to_string(F_) + ": resume with the same HybridOptions::groups");
    }
    const std::vector<double> flat = get_doubles(a, "history");
    history_.clear();
    for (size_t i = 0; i + F_ <= flat.size(); i += F_) history_.emplace_back(flat.begin() + i, flat.begin() + i + F_);
    gen_.set_state(get_tensor(a, "gen_state"));
    torch::serialize::InputArchive m, o;
    a.read("model", m);
    a.read("adam", o);
    model_->load(m);
    opt_.load(o);
    rollout_.clear();
  }

 private:
  struct Forecast {
    double dlogloss = 0.0;        // ensemble mean of the predicted log-loss change of this step
    std::vector<double> alpha;    // [G] ensemble mean multiplier, clamped
    double spread = 0.0;          // mean over groups of the members' std of alpha
  };

  void update_stats(const std::vector<double>& raw) {
    if (observations_ == 0) {
      mean_ = raw;
      return;
    }
    for (int64_t j = 0; j < F_; ++j) {
      const double d = raw[j] - mean_[j];
      mean_[j] += (1.0 - kStatsDecay) * d;
      var_[j] = kStatsDecay * (var_[j] + (1.0 - kStatsDecay) * d * d);
    }
  }

  double scale(int64_t j) const { return std::sqrt(std::max(var_[j], 1e-8)); }

  at::Tensor normalized_window() const {  // [T, F]
    const int64_t T = static_cast<int64_t>(history_.size());
    at::Tensor w = torch::empty({T, F_}, torch::kFloat);
    auto acc = w.accessor<float, 2>();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < F_; ++j) acc[t][j] = static_cast<float>((history_[t][j] - mean_[j]) / scale(j));
    }
    return w;
  }

  // One truncated-BPTT step over the recent window: reconstruction through the posterior, one-step
  // prediction through the prior, and KL(q || p) to keep the two consistent.
  void train() {
    torch::AutoGradMode grad(true);
    const at::Tensor obs = normalized_window();  // [T, F]
    const int64_t T = obs.size(0);
    at::Tensor h = torch::zeros({E_, 1, H_});
    at::Tensor z = torch::zeros({E_, 1, Z_});
    at::Tensor o_prev = torch::zeros({E_, 1, F_});
    at::Tensor loss = torch::zeros({});
    for (int64_t t = 0; t < T; ++t) {
      const at::Tensor o = obs[t].view({1, 1, F_}).expand({E_, 1, F_});
      h = model_->gru(h, torch::cat({o_prev, z}, -1));
      const auto [mp, sp] = model_->prior(h);
      const auto [mq, sq] = model_->posterior(h, o);
      z = mq + sq * at::randn({E_, 1, Z_}, gen_);
      const at::Tensor kl = (torch::log(sp / sq) + (sq * sq + (mq - mp).pow(2)) / (2.0 * sp * sp) - 0.5).sum();
      loss = loss + (model_->decode(h, z) - o).pow(2).sum() + (model_->decode(h, mp) - o).pow(2).sum() + kKlWeight * kl;
      o_prev = o;
    }
    opt_.zero_grad();
    (loss / static_cast<double>(T * E_)).backward();
    opt_.step();
    ++updates_;
    rollout_.clear();
  }

  // Filters the window with posterior means, then imagines forward with prior samples. The
  // sampling generator is re-seeded from the observation count, so a forecast is reproducible
  // after a resume whatever was cached before.
  void roll_out(int64_t steps) {
    if (static_cast<int64_t>(rollout_.size()) >= steps) return;
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(seed_ + 7919 * static_cast<uint64_t>(observations_));
    const at::Tensor obs = normalized_window();
    at::Tensor h = torch::zeros({E_, 1, H_});
    at::Tensor z = torch::zeros({E_, 1, Z_});
    at::Tensor o_prev = torch::zeros({E_, 1, F_});
    for (int64_t t = 0; t < obs.size(0); ++t) {
      const at::Tensor o = obs[t].view({1, 1, F_}).expand({E_, 1, F_});
      h = model_->gru(h, torch::cat({o_prev, z}, -1));
      z = model_->posterior(h, o).first;
      o_prev = o;
    }
    rollout_.clear();
    for (int64_t k = 0; k < steps; ++k) {
      h = model_->gru(h, torch::cat({o_prev, z}, -1));
      const auto [mp, sp] = model_->prior(h);
      z = mp + sp * at::randn({E_, 1, Z_}, gen);
      o_prev = model_->decode(h, z);  // [E, 1, F], normalised
      const at::Tensor o = o_prev.reshape({E_, F_}).to(torch::kDouble).contiguous();
      auto acc = o.accessor<double, 2>();
      Forecast fc;
      fc.alpha.assign(G_, 0.0);
      for (int64_t e = 0; e < E_; ++e) fc.dlogloss += (acc[e][1] * scale(1) + mean_[1]) / E_;
      for (int64_t g = 0; g < G_; ++g) {
        const int64_t j = 6 + G_ + g;
        double s = 0.0, s2 = 0.0;
        for (int64_t e = 0; e < E_; ++e) {
          const double a = acc[e][j] * scale(j) + mean_[j];
          s += a;
          s2 += a * a;
        }
        const double m = s / E_;
        fc.alpha[g] = std::min(kAlphaMax, std::max(0.0, m));
        fc.spread += std::sqrt(std::max(0.0, s2 / E_ - m * m)) / G_;
      }
      rollout_.push_back(std::move(fc));
    }
  }

  int64_t E_, G_, F_, H_, Z_, W_, train_every_;
  double beta_;
  uint64_t seed_;
  at::Generator gen_;  // training noise of the latent; its state is saved
  std::shared_ptr<RssmEnsemble> model_;
  torch::optim::Adam opt_;
  std::vector<double> mean_, var_;            // [F] running feature statistics
  std::deque<std::vector<double>> history_;   // last W raw feature vectors
  std::vector<at::Tensor> ema_;               // EMA update direction per parameter
  std::vector<int64_t> group_;
  int64_t ema_count_ = 0;
  int64_t observations_ = 0;
  int64_t updates_ = 0;
  std::vector<Forecast> rollout_;             // cache, valid until the next observation
};

}  // namespace

std::unique_ptr<UpdatePredictor> make_rssm_predictor(const HybridOptions& options) {
  options.validate();
  return std::make_unique<RssmPredictor>(options);
}

// The registry's entry (predictor_registry.cpp). State: the EMA direction it scales (one copy);
// its model and windows are a few KiB. It also reads ema_beta, the ema predictor's option.
PredictorSpec rssm_predictor_spec() {
  return {"rssm", "a small learned dynamics model: GRU state, stochastic latent, ensemble", UpdatePredictor::Input::Updates,
          {{"rssm_ensemble", 3, 1, 64, true, "rssm predictor: ensemble members (their spread is its uncertainty)"},
           {"rssm_hidden", 32, 1, 4096, true, "rssm predictor: GRU state size"},
           {"rssm_latent", 8, 1, 1024, true, "rssm predictor: stochastic latent size"},
           {"rssm_window", 16, 4, 4096, true, "rssm predictor: truncated-BPTT window in recorded steps (>= 4, the least it trains on)"},
           {"rssm_train_every", 4, 1, 1000000, true, "rssm predictor: one optimisation step every n observations"},
           {"rssm_lr", 3e-3, 1e-9, 1.0, false, "rssm predictor: its model's Adam learning rate"}},
          [](const HybridOptions& o) { return make_rssm_predictor(o); },
          [](const std::vector<int64_t>& n, const HybridOptions&) { return parameter_copies_bytes(n, 1); }, {}};
}

}  // namespace ht
