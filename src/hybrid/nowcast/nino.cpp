// The NiNo GNN on a model's neural graph: Laplacian node features, 5 normalised states per edge,
// message passing with edge updates; each edge decodes its change at horizon k.
//
// Edge inputs are the 5 states (x 9 values for conv kernels); messages are modulated by the edge
// states, which are then updated from their end nodes; the decoded change is added to the edge's
// last normalised state.
//
// Memory, with E edges (~ the parameter count) and P parameters: the edge states [E, 128] float
// (512 B/edge), src/dst/type (24 B/edge) and the feature rows (8 B/edge x features, 9 for 3x3
// CNNs) stay for the prediction, plus 24 B/parameter (normalised states, prediction). Everything
// else is per node or per chunk of `chunk_rows` edges (~1.5 KB/row). The graph, its features and
// node inputs are built once per model.
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "hybrid/hybrid/nowcast.h"
#include "hybrid/hybrid/nowcaster_registry.h"
#include "laplacian.h"
#include "neural_graph.h"
#include "nowcast_weights.h"
#include "tensor_scale.h"

namespace ht {
namespace {

at::Tensor silu_inplace(at::Tensor t) {  // in place, on a temporary
  at::silu_(t);
  return t;
}

using nowcast::TensorScale;

constexpr int64_t kLpeDim = 8;       // Laplacian eigenvectors per node
constexpr int64_t kMaxFeatures = 9;  // kernel values per edge the edge projection takes

struct Layer {  // one message-passing layer and the edge update after it
  at::Tensor pre_target, pre_source, pre_b;  // message: Linear(cat[x_target, x_source])
  at::Tensor enc_w, enc_b;                   // edge -> (scale, shift) of the message
  at::Tensor post_x, post_agg, post_b;       // node update: Linear(cat[x, mean message])
  at::Tensor lin_w, lin_b;
  at::Tensor le_w, le_b, ls_w, ls_b, lt_w, lt_b, l1_w, l1_b;  // edge update
};

class NiNo final : public NowcastModel {
 public:
  NiNo(const std::string& path, NowcastSpec spec, NowcastOptions options)
      : NowcastModel(std::move(spec)), chunk_(options.chunk_rows) {
    if (chunk_ < 1) throw NowcastError("nowcast: NowcastOptions::chunk_rows must be >= 1");
    load_weights(path);
    at::NoGradGuard no_grad;
    graph_ = nowcast::build_neural_graph(this->spec());
    edges_ = nowcast::edge_tensors(graph_);
    for (const auto& p : this->spec().params) {
      offsets_.push_back(total_);
      int64_t n = 1;
      for (int64_t s : p.shape) n *= s;
      total_ += n;
    }
    rows_ = nowcast::feature_rows(graph_, offsets_, total_);
    const auto lpe = nowcast::laplacian_features(graph_, kLpeDim, options.max_eigen_nodes);
    x0_ = at::addmm(node_b_, lpe.pe, node_w_.t());  // [N, h]: depends on the graph only
    count_ = at::bincount(edges_.dst, {}, graph_.nodes).to(at::kFloat).unsqueeze(1);  // [N, 1]
    const int64_t F = graph_.features;
    proj_w_ = proj_w_.narrow(1, 0, F * kNowcastContext).contiguous();  // [h, F*5]
  }

  std::string name() const override { return "nino"; }
  int64_t max_horizon() const override { return horizons_; }
  int64_t graph_nodes() const override { return graph_.nodes; }
  int64_t graph_edges() const override { return graph_.edges; }

 protected:
  void predict_checked(const std::vector<std::vector<at::Tensor>>& states, int64_t k,
                       const std::vector<at::Tensor>& out) override {
    const auto& params = spec().params;
    const int64_t E = graph_.edges, F = graph_.features, h = hidden_;

    // The table every edge feature is read from: parameter elements, then 0, 1, 2.
    at::Tensor table = at::empty({total_ + 3, kNowcastContext}, at::kFloat);
    table[total_].fill_(0.0);
    table[total_ + 1].fill_(1.0);
    table[total_ + 2].fill_(2.0);
    std::vector<TensorScale> scales;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<at::Tensor> flat;
      for (const auto& s : states[i]) flat.push_back(s.reshape(-1));
      scales.push_back(nowcast::tensor_scale(flat, chunk_));
      const int64_t n = flat.front().numel();
      for (int64_t a = 0; a < n; a += chunk_) {
        const int64_t m = std::min(chunk_, n - a);
        table.narrow(0, offsets_[i] + a, m).copy_(nowcast::normalised_rows(flat, a, m, scales[i]));
      }
    }
    auto features = [&](int64_t a, int64_t m) {  // [m, F, 5]
      return table.index_select(0, rows_.narrow(0, a, m).reshape(-1)).view({m, F, kNowcastContext});
    };

    // Edge states: projected features plus the type embedding.
    at::Tensor e = at::empty({E, h}, at::kFloat);  // [E, h]
    for (int64_t a = 0; a < E; a += chunk_) {
      const int64_t m = std::min(chunk_, E - a);
      at::Tensor ec = e.narrow(0, a, m);
      at::addmm_out(ec, proj_b_, features(a, m).view({m, F * kNowcastContext}), proj_w_.t());
      ec.add_(embed_.index_select(0, edges_.type.narrow(0, a, m)));
    }

    // Message passing. Only edge states reach the output, and layer i updates them after its
    // node update only for i < layers - 1, so the last layer's node update is skipped.
    at::Tensor x = x0_;
    for (const Layer& l : layers_) {
      const at::Tensor target = at::mm(x, l.pre_target.t());              // [N, h]
      const at::Tensor source = at::addmm(l.pre_b, x, l.pre_source.t());  // [N, h]
      at::Tensor agg = at::zeros({graph_.nodes, h}, at::kFloat);
      for (int64_t a = 0; a < E; a += chunk_) {
        const int64_t m = std::min(chunk_, E - a);
        const at::Tensor dst = edges_.dst.narrow(0, a, m), src = edges_.src.narrow(0, a, m);
        const at::Tensor st = at::addmm(l.enc_b, e.narrow(0, a, m), l.enc_w.t());  // [m, 2h]
        at::Tensor msg = target.index_select(0, dst) + source.index_select(0, src);
        msg.mul_(st.narrow(1, 0, h)).add_(st.narrow(1, h, h));
        agg.index_add_(0, dst, msg);
      }
      agg.div_(count_);  // mean over incoming edges (every node has its self-loop)
      x = at::addmm(l.post_b, x, l.post_x.t()).add_(at::mm(agg, l.post_agg.t()));
      x = silu_inplace(at::addmm(l.lin_b, x, l.lin_w.t()));
      const at::Tensor s = at::addmm(l.ls_b, x, l.ls_w.t());  // [N, h]
      const at::Tensor t = at::addmm(l.lt_b, x, l.lt_w.t());
      for (int64_t a = 0; a < E; a += chunk_) {
        const int64_t m = std::min(chunk_, E - a);
        at::Tensor ec = e.narrow(0, a, m);
        at::Tensor u = at::addmm(l.le_b, ec, l.le_w.t());
        u.add_(s.index_select(0, edges_.src.narrow(0, a, m)))
            .add_(t.index_select(0, edges_.dst.narrow(0, a, m)));
        at::addmm_out(ec, l.l1_b, silu_inplace(u), l.l1_w.t());
      }
    }

    // Decode horizon k for every feature, add the last normalised state, collect per element.
    std::vector<int64_t> head_rows;
    for (int64_t f = 0; f < F; ++f) head_rows.push_back(f * horizons_ + k - 1);
    const at::Tensor rows_k = at::tensor(head_rows, at::kLong);
    const at::Tensor w_k = out2_w_.index_select(0, rows_k), b_k = out2_b_.index_select(0, rows_k);
    at::Tensor pred_norm = at::empty({total_}, at::kFloat);
    for (int64_t a = 0; a < E; a += chunk_) {
      const int64_t m = std::min(chunk_, E - a);
      const at::Tensor hid = silu_inplace(at::addmm(out0_b_, e.narrow(0, a, m), out0_w_.t()));
      const at::Tensor pred =
          features(a, m).select(2, kNowcastContext - 1) + at::addmm(b_k, hid, w_k.t());  // [m, F]
      const at::Tensor rows = rows_.narrow(0, a, m);
      const at::Tensor is_param = rows < total_;
      pred_norm.index_put_({rows.masked_select(is_param)}, pred.masked_select(is_param));
    }
    e = at::Tensor();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor out_flat = out[i].view(-1);
      nowcast::denormalise_into(out_flat, pred_norm.narrow(0, offsets_[i], out_flat.numel()),
                                scales[i]);
    }
  }

 private:
  void load_weights(const std::string& path) {
    const nowcast::WeightFile f(path, "NiNo", "models/nino/nino_no_posw.safetensors");
    if (!f.has("gnn.convs.0.lin.weight") && f.has("edge_mlp.fc.0.weight")) {
      throw NowcastError("NiNo weights '" + path +
                         "' hold WNN+ (no graph); load them with "
                         "load_wnn_plus, or pass models/nino/nino_no_posw.safetensors here");
    }
    if (f.has("wte_pos_enc_layer.weight")) {
      throw NowcastError("NiNo weights '" + path +
                         "' use word-position encodings "
                         "(wte_pos_enc), which are tied to GPT-2's tokenizer and not supported "
                         "here; use models/nino/nino_no_posw.safetensors");
    }
    embed_ = f.get("layer_embed.weight", {15, -1});
    const int64_t h = hidden_ = embed_.size(1);
    node_w_ = f.get("node_proj.fc.0.weight", {h, kLpeDim});
    node_b_ = f.get("node_proj.fc.0.bias", {h});
    proj_w_ = f.get("edge_proj.fc.0.weight", {h, kMaxFeatures * kNowcastContext});
    proj_b_ = f.get("edge_proj.fc.0.bias", {h});
    int64_t convs = 0;
    while (f.has("gnn.convs." + std::to_string(convs) + ".lin.weight")) ++convs;
    if (convs < 2) {
      throw NowcastError("NiNo weights '" + path + "': " + std::to_string(convs) +
                         " message-passing layers found, expected 3 (gnn.convs.0-2)");
    }
    for (int64_t i = 0; i + 1 < convs; ++i) {
      const std::string c = "gnn.convs." + std::to_string(i) + ".";
      const std::string u = "gnn.edge_update." + std::to_string(i) + ".";
      Layer l;
      const at::Tensor pre = f.get(c + "pre_nns.0.0.weight", {h, 2 * h});
      l.pre_target = pre.narrow(1, 0, h).contiguous();
      l.pre_source = pre.narrow(1, h, h).contiguous();
      l.pre_b = f.get(c + "pre_nns.0.0.bias", {h});
      l.enc_w = f.get(c + "edge_encoder.weight", {2 * h, h});
      l.enc_b = f.get(c + "edge_encoder.bias", {2 * h});
      const at::Tensor post = f.get(c + "post_nns.0.0.weight", {h, 2 * h});
      l.post_x = post.narrow(1, 0, h).contiguous();
      l.post_agg = post.narrow(1, h, h).contiguous();
      l.post_b = f.get(c + "post_nns.0.0.bias", {h});
      l.lin_w = f.get(c + "lin.weight", {h, h});
      l.lin_b = f.get(c + "lin.bias", {h});
      l.le_w = f.get(u + "lin_e.weight", {h, h}), l.le_b = f.get(u + "lin_e.bias", {h});
      l.ls_w = f.get(u + "lin_s.weight", {h, h}), l.ls_b = f.get(u + "lin_s.bias", {h});
      l.lt_w = f.get(u + "lin_t.weight", {h, h}), l.lt_b = f.get(u + "lin_t.bias", {h});
      l.l1_w = f.get(u + "lin1.weight", {h, h}), l.l1_b = f.get(u + "lin1.bias", {h});
      layers_.push_back(l);
    }
    out0_w_ = f.get("edge_out.fc.0.weight", {h, h});
    out0_b_ = f.get("edge_out.fc.0.bias", {h});
    out2_w_ = f.get("edge_out.fc.2.weight", {-1, h});  // [9 * horizons, h], kernel-value-major
    if (out2_w_.size(0) % kMaxFeatures != 0) {
      throw NowcastError("NiNo weights '" + path + "': edge_out.fc.2.weight has " +
                         std::to_string(out2_w_.size(0)) + " rows, not 9 x horizons");
    }
    horizons_ = out2_w_.size(0) / kMaxFeatures;
    out2_b_ = f.get("edge_out.fc.2.bias", {out2_w_.size(0)});
  }

  int64_t chunk_;
  int64_t hidden_ = 0, horizons_ = 0;
  at::Tensor embed_, node_w_, node_b_, proj_w_, proj_b_, out0_w_, out0_b_, out2_w_, out2_b_;
  std::vector<Layer> layers_;

  nowcast::NeuralGraph graph_;
  nowcast::EdgeTensors edges_;
  at::Tensor rows_;   // [E, F] table rows of each edge's features
  at::Tensor x0_;     // [N, h] projected Laplacian features
  at::Tensor count_;  // [N, 1] incoming edges per node
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
};

}  // namespace

std::unique_ptr<NowcastModel> load_nino(const std::string& path, NowcastSpec spec,
                                        NowcastOptions options) {
  return std::make_unique<NiNo>(path, std::move(spec), options);
}

NeuralGraphInfo describe_neural_graph(const NowcastSpec& spec, NowcastOptions options) {
  at::NoGradGuard no_grad;
  const auto graph = nowcast::build_neural_graph(spec);
  const auto edges = nowcast::edge_tensors(graph);
  const auto lpe = nowcast::laplacian_features(graph, kLpeDim, options.max_eigen_nodes);
  NeuralGraphInfo info;
  info.nodes = graph.nodes;
  info.edges = graph.edges;
  info.eigen_nodes = lpe.eigen_nodes;
  info.src = edges.src;
  info.dst = edges.dst;
  info.edge_type = edges.type;
  info.degree = lpe.degree;
  info.lpe = lpe.pe;
  return info;
}

// The registry's entry (nowcaster_registry.cpp lists it). Kept between jumps: its 2.2 MB of
// weights and the neural graph with its features, ~40 B per parameter (32.2 MiB for the tiny
// GPT's 0.84M). A jump adds the edge states and chunk workspace: 560-700 B per parameter on the
// GPTs and FM-16 (bench/results/nowcast_bench.log), ~820 on the MLP (memory_plan_test.cpp);
// 780 is within 20 % of each.
NowcasterSpec nino_nowcaster_spec() {
  NowcasterSpec s;
  s.name = "nino";
  s.help = "NiNo (graph neural network on the model's neural graph, released nino_no_posw weights)";
  s.weights_file = "nino/nino_no_posw.safetensors";
  s.load = [](const std::string& path, NowcastSpec spec, const NowcastOptions& options) {
    return load_nino(path, std::move(spec), options);
  };
  s.kept_bytes = [](const std::vector<int64_t>& numels) -> int64_t {
    int64_t n = 0;
    for (int64_t x : numels) n += x;
    return (2304 << 10) + 40 * n;
  };
  s.jump_bytes = [](const std::vector<int64_t>& numels, const NowcastOptions&, const std::string&) -> int64_t {
    int64_t n = 0;
    for (int64_t x : numels) n += x;
    return 780 * n;
  };
  return s;
}

}  // namespace ht
