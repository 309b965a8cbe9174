// WNN+: every scalar on its own, through Linear(5 -> 128) + the embedding of its parameter kind,
// 3 x (Linear 128 + SiLU) and horizon k's row of Linear(128 -> 40), added to its last state.
#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "hybrid/hybrid/nowcast.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "nowcast_weights.h"
#include "tensor_scale.h"

namespace ht {
namespace {

at::Tensor silu_inplace(at::Tensor t) {  // in place, on a temporary
  at::silu_(t);
  return t;
}

using nowcast::TensorScale;

class WnnPlus final : public NowcastModel {
 public:
  WnnPlus(const std::string& path, NowcastSpec spec, NowcastOptions options)
      : NowcastModel(std::move(spec)), chunk_(options.chunk_rows), device_(options.device) {
    if (chunk_ < 1) throw NowcastError("nowcast: NowcastOptions::chunk_rows must be >= 1");
    for (const auto& p : this->spec().params) {
      const int kind = static_cast<int>(p.kind);
      if (p.kind == ParamKind::kAttnQKV) {
        if (p.shape.size() != 2 || p.shape[1] % 3 != 0) {
          throw NowcastError("nowcast: '" + p.name + "' has kind kAttnQKV but is not [C, 3C]");
        }
      } else if (kind < 1 || kind > 9) {
        throw NowcastError("nowcast: '" + p.name + "' has kind " + std::to_string(kind) +
                           "; WNN+ takes parameter kinds 1-9 or kAttnQKV");
      }
    }
    const nowcast::WeightFile f(path, "WNN+",
                                "models/nino/nino_mlp.safetensors (released) or models/own/own_wnn.safetensors (ours)");
    if (f.has("gnn.convs.0.lin.weight")) {
      throw NowcastError("WNN+ weights '" + path +
                         "' hold the NiNo GNN; load them with "
                         "load_nino, or pass models/nino/nino_mlp.safetensors here");
    }
    const at::Tensor embed = f.get("layer_embed.weight", {15, -1});  // [15, h]
    const int64_t h = embed.size(1);
    w_in_ = f.get("edge_proj.fc.0.weight", {h, kNowcastContext});
    type_bias_ = embed + f.get("edge_proj.fc.0.bias", {h});  // [15, h]: projection bias folded in
    for (int l = 0; l < 3; ++l) {
      const std::string n = "edge_mlp.fc." + std::to_string(2 * l);
      w_[l] = f.get(n + ".weight", {h, h});
      b_[l] = f.get(n + ".bias", {h});
    }
    w_out_ = f.get("edge_mlp.fc.6.weight", {-1, h});  // [horizons, h]
    b_out_ = f.get("edge_mlp.fc.6.bias", {w_out_.size(0)});
    for (at::Tensor* t : {&w_in_, &type_bias_, &w_out_, &b_out_, &w_[0], &w_[1], &w_[2], &b_[0], &b_[1], &b_[2]})
      *t = t->to(device_);
  }

  std::string name() const override { return "wnn+"; }
  int64_t max_horizon() const override { return w_out_.size(0); }

 protected:
  void predict_checked(const std::vector<std::vector<at::Tensor>>& states, int64_t k,
                       const std::vector<at::Tensor>& out) override {
    const at::Tensor w_k = w_out_[k - 1];  // [h]
    const double b_k = b_out_[k - 1].item<double>();
    const auto& params = spec().params;
    const bool host = device_.is_cpu();
    for (size_t i = 0; i < params.size(); ++i) {
      // Off the host, one tensor's 5 states go over at once (5 x numel floats on the device) and
      // its prediction comes back at once: per-chunk round trips made a tiny-GPT jump ~300 ms.
      std::vector<at::Tensor> flat;
      for (const auto& s : states[i]) flat.push_back(s.reshape(-1).to(device_));
      const TensorScale scale = nowcast::tensor_scale(flat, chunk_);
      const at::Tensor out_flat = host ? out[i].view(-1) : at::empty({out[i].numel()}, flat.front().options());
      const int64_t n = out_flat.numel();
      const bool qkv = params[i].kind == ParamKind::kAttnQKV;
      const int64_t width = qkv ? params[i].shape[1] : 0;  // 3C
      const at::Tensor bias = qkv ? at::Tensor() : type_bias_[static_cast<int>(params[i].kind)];
      for (int64_t a = 0; a < n; a += chunk_) {
        const int64_t m = std::min(chunk_, n - a);
        const at::Tensor x = nowcast::normalised_rows(flat, a, m, scale);  // [m, 5]
        at::Tensor rows = bias;
        if (qkv) {  // columns [0, C) query, [C, 2C) key, [2C, 3C) value
          const at::Tensor col = at::remainder(at::arange(a, a + m, at::TensorOptions(at::kLong).device(device_)), width);
          rows = type_bias_.index_select(0, at::div(col, width / 3, "floor") + 7);  // [m, h]
        }
        at::Tensor h = at::addmm(rows, x, w_in_.t());  // [m, h]
        for (int l = 0; l < 3; ++l) h = silu_inplace(at::addmm(b_[l], h, w_[l].t()));
        const at::Tensor pred = x.select(1, kNowcastContext - 1) + at::mv(h, w_k).add_(b_k);
        nowcast::denormalise_into(out_flat.narrow(0, a, m), pred, scale);
      }
      if (!host) out[i].view(-1).copy_(out_flat);
    }
  }

 private:
  int64_t chunk_;
  c10::Device device_;
  at::Tensor w_in_, type_bias_, w_out_, b_out_;
  std::array<at::Tensor, 3> w_, b_;
};

}  // namespace

std::unique_ptr<NowcastModel> load_wnn_plus(const std::string& path, NowcastSpec spec,
                                            NowcastOptions options) {
  return std::make_unique<WnnPlus>(path, std::move(spec), options);
}

// The registry's entry (nowcaster_registry.cpp lists it). Kept between jumps: its 0.2 MiB of
// weights. A jump's workspace is per chunk of rows, whatever the model size: two [rows, 128]
// hidden states and the normalised rows, ~1064 B a row, and for GPT-2's fused q|k|v one more
// [rows, 128] of per-row kind embeddings (48.6 MiB measured at 32768 rows on the tiny GPT,
// bench/results/nowcast_bench.log; 33 MiB on the MLP, tests/apps/memory_plan_test.cpp).
NowcasterSpec wnn_nowcaster_spec() {
  NowcasterSpec s;
  s.name = "wnn";
  s.help = "WNN+ (NiNo's per-scalar MLP, released nino_mlp weights): cheap, no graph";
  s.weights_file = "nino/nino_mlp.safetensors";
  s.load = [](const std::string& path, NowcastSpec spec, const NowcastOptions& options) {
    return load_wnn_plus(path, std::move(spec), options);
  };
  s.kept_bytes = [](const std::vector<int64_t>&) -> int64_t { return 256 << 10; };
  s.jump_bytes = [](const std::vector<int64_t>& numels, const NowcastOptions& options,
                     const std::string& architecture) -> int64_t {
    int64_t rows = 0;
    for (int64_t n : numels) rows = std::max(rows, std::min(n, options.chunk_rows));
    return rows * (architecture == "gpt2" ? 1576 : 1064);
  };
  return s;
}

namespace {

// The WNN+ network with other weights: the same forward and costs, another name and file.
NowcasterSpec wnn_with_weights(const char* name, const char* help, const char* weights_file) {
  NowcasterSpec s = wnn_nowcaster_spec();
  s.name = name;
  s.help = help;
  s.weights_file = weights_file;
  return s;
}

}  // namespace

// Our own: weights meta-trained on this project's runs (nowcast-meta, apps/nowcast-meta;
// models/own/README.md says which corpus and scale).
NowcasterSpec own_nowcaster_spec() {
  return wnn_with_weights("own", "WNN+ meta-trained on this project's own runs (nowcast-meta, models/own)",
                          "own/own_wnn.safetensors");
}

// Our own, meta-trained on GPTs only: byte-level GPTs of the tiny GPT benchmark's scale (nowcast-meta
// build --families gpt --gpt-size medium; models/own/README.md), for transformer runs.
NowcasterSpec own_gpt_nowcaster_spec() {
  return wnn_with_weights("own-gpt", "WNN+ meta-trained on this project's own byte-level GPT runs only (models/own)",
                          "own/own_wnn_gpt.safetensors");
}

// Our own, meta-trained on word-level GPTs at AdamW's tuned rates (nowcast-meta build --families
// gpt-words, on Debian's English fortunes; models/own/README.md): the trajectories the released
// models never saw, for the word-level GPT where they pay only at NiNo's slow rate.
NowcasterSpec own_words_nowcaster_spec() {
  return wnn_with_weights("own-words", "WNN+ meta-trained on this project's word-level GPT runs at tuned rates (models/own)",
                          "own/own_wnn_words.safetensors");
}

// own-gpt tuned through the task's loss at its predicted weights (nowcast-meta tune, LossTuner in
// nowcast/loss_tune.cpp): L1 to the future alone had made own-gpt's jumps closer in weight space
// and worse in loss. Its rows past k = 20 are trained by the loss term alone.
NowcasterSpec own_gpt_loss_nowcaster_spec() {
  return wnn_with_weights("own-gpt-loss", "own-gpt tuned through the loss at its predicted weights (nowcast-meta tune)",
                          "own/own_wnn_gpt_loss.safetensors");
}

// The released WNN+ tuned on this project's CNN runs through the loss its jumps leave once the
// optimizer has corrected them (nowcast-meta tune --recover-steps; models/own/README.md).
NowcasterSpec wnn_tuned_nowcaster_spec() {
  return wnn_with_weights("wnn-tuned", "the released WNN+ tuned through the loss 100 steps after its jumps, on our CNN runs",
                          "own/wnn_tuned.safetensors");
}

}  // namespace ht
