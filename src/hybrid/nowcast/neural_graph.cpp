// Neural-graph construction for NiNo: the node numbering and edge order of the authors' graphs
// (checked against them), for chains of Linear/Conv2d layers and for GPT-2 with per-head nodes.
#include "neural_graph.h"

#include <map>
#include <set>
#include <string>

#include <ATen/ATen.h>

namespace ht::nowcast {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Node ranges are handed out in order; the numbering matters (the Laplacian features are made
// canonical in node order), so callers allocate exactly as the reference graphs are numbered.
struct Builder {
  NeuralGraph g;
  int64_t alloc(int64_t n) {
    const int64_t first = g.nodes;
    g.nodes += n;
    return first;
  }
  EdgeBlock& add(EdgeBlock b) {
    g.edges += b.count();
    g.blocks.push_back(b);
    return g.blocks.back();
  }
  // A parameter's dense block: rows x cols, element (i, o) at elem0 + i*sr + o*sc.
  void weight(int64_t row0, int64_t rows, int64_t col0, int64_t cols, int64_t type, int64_t param,
              int64_t elem0, int64_t sr, int64_t sc, int64_t kernel = 1, bool reversed = false) {
    EdgeBlock b;
    b.row0 = row0, b.rows = rows, b.col0 = col0, b.cols = cols, b.type = type;
    b.param = param, b.elem0 = elem0, b.stride_row = sr, b.stride_col = sc, b.kernel = kernel;
    b.reversed = reversed;
    add(b);
  }
  // A 1-D parameter: one node feeding every neuron of a range.
  void vector(int64_t node, int64_t col0, int64_t cols, int64_t type, int64_t param,
              int64_t elem0 = 0) {
    weight(node, 1, col0, cols, type, param, elem0, 0, 1);
  }
  // Fixed edges: dense (group 0) or row i -> cols [i*group, (i+1)*group).
  void fixed(int64_t row0, int64_t rows, int64_t col0, int64_t cols, int64_t type, int64_t value,
             int64_t group) {
    EdgeBlock b;
    b.row0 = row0, b.rows = rows, b.col0 = col0, b.cols = cols, b.type = type;
    b.value = value, b.group = group;
    add(b);
  }
};

int64_t edge_type(ParamKind kind, const NowcastParam& p) {
  const int v = static_cast<int>(kind);
  if (v < 1 || v > 9) {
    throw NowcastError("nowcast: parameter '" + p.name + "' has kind " + std::to_string(v) +
                       ", which is not a parameter edge type of NiNo (1-9)");
  }
  return v;
}

// MLPs and CNNs. Layout per layer: [its 1-D parameters' nodes][its output neurons], after the
// input neurons. Edges: the weight (inputs -> outputs), then each 1-D parameter's node -> outputs.
void build_feedforward(Builder& b, const NowcastSpec& spec) {
  struct Layer {
    int64_t weight;
    std::vector<int64_t> extras;
  };
  std::vector<Layer> layers;
  for (int64_t i = 0; i < static_cast<int64_t>(spec.params.size()); ++i) {
    const auto& p = spec.params[i];
    if (p.shape.size() == 1) {
      if (layers.empty()) {
        throw NowcastError("nowcast graph: 1-D parameter '" + p.name +
                           "' comes before any weight; a feed-forward spec lists each layer's "
                           "weight first, then its bias / norm parameters");
      }
      const auto& w = spec.params[layers.back().weight];
      if (p.shape[0] != w.shape[0]) {
        throw NowcastError("nowcast graph: '" + p.name + "' has " + std::to_string(p.shape[0]) +
                           " values but acts on the " + std::to_string(w.shape[0]) +
                           " outputs of '" + w.name + "' (parameters must be in model order)");
      }
      layers.back().extras.push_back(i);
    } else if (p.shape.size() == 2 || p.shape.size() == 4) {
      if (p.kind == ParamKind::kAttnQKV) {
        throw NowcastError("nowcast graph: '" + p.name +
                           "' is a fused q|k|v weight; use the "
                           "GPT-2 family (nowcast_spec_gpt2)");
      }
      layers.push_back({i, {}});
      if (p.shape.size() == 4) {
        const int64_t k = p.shape[2] * p.shape[3];
        if (k > 9) {
          throw NowcastError("nowcast graph: conv '" + p.name + "' has " + std::to_string(k) +
                             "-value kernels; NiNo takes at most 9 (3x3). WNN+ has no limit");
        }
        b.g.features = std::max(b.g.features, k);
      }
    } else {
      throw NowcastError("nowcast graph: parameter '" + p.name + "' has shape " +
                         shape_str(p.shape) + "; expected 1-D, 2-D or 4-D");
    }
  }
  if (layers.empty()) throw NowcastError("nowcast graph: the spec has no weight");

  int64_t prev = b.alloc(spec.params[layers[0].weight].shape[1]);
  int64_t prev_n = spec.params[layers[0].weight].shape[1];
  bool prev_conv = false;
  for (const auto& layer : layers) {
    const auto& w = spec.params[layer.weight];
    const int64_t n_out = w.shape[0], n_in = w.shape[1];
    const bool conv = w.shape.size() == 4;
    if (n_in != prev_n) {
      if (!conv && prev_conv && n_in % prev_n == 0) {
        // Flatten [C, H, W] -> C*H*W: channel c feeds inputs c*S .. c*S + S-1 through fixed
        // identity edges. Our extension: the reference graph has no flatten (its rows would run
        // into the next layer's nodes); NiNo's own CNNs pool globally instead.
        const int64_t spatial = n_in / prev_n;
        const int64_t flat = b.alloc(n_in);
        b.fixed(prev, prev_n, flat, n_in, static_cast<int64_t>(ParamKind::kResidual), 1, spatial);
        prev = flat;
      } else {
        throw NowcastError("nowcast graph: '" + w.name + "' takes " + std::to_string(n_in) +
                           " inputs but the layer before it has " + std::to_string(prev_n) +
                           " outputs; list parameters in model order (a Linear after a conv "
                           "may flatten it: in_features a multiple of the channels)");
      }
    }
    std::vector<int64_t> extra_nodes;
    for (size_t e = 0; e < layer.extras.size(); ++e) extra_nodes.push_back(b.alloc(1));
    const int64_t out = b.alloc(n_out);
    const int64_t type = edge_type(w.kind, w);
    if (conv) {
      const int64_t k =
          w.shape[2] * w.shape[3];  // [out, in, kh, kw]: (o, i, f) at (o*in + i)*k + f
      b.weight(prev, n_in, out, n_out, type, layer.weight, 0, k, n_in * k, k);
    } else {  // [out, in]: (o, i) at o*in + i
      b.weight(prev, n_in, out, n_out, type, layer.weight, 0, 1, n_in);
    }
    for (size_t e = 0; e < layer.extras.size(); ++e) {
      const auto& p = spec.params[layer.extras[e]];
      b.vector(extra_nodes[e], out, n_out, edge_type(p.kind, p), layer.extras[e]);
    }
    prev = out, prev_n = n_out, prev_conv = conv;
  }
}

// GPT-2 (Hugging Face names, Conv1D weights [in, out], c_attn = q|k|v). Layout, as the
// reference numbers it: tokens, positions, then per block
//   ln_1.w, ln_1.b, key-bias, X (the residual stream entering the block, C), heads (H),
//   q-bias, v-bias, Q (C), V (C), attn.c_proj.b, ln_2.w, ln_2.b, Xm (mid-block stream, C),
//   c_fc.b, hidden (4C), mlp.c_proj.b
// and finally ln_f.w, ln_f.b, the output stream (C).
void build_gpt2(Builder& b, const NowcastSpec& spec) {
  std::map<std::string, int64_t> index;
  std::string prefix;
  bool found = false;
  for (int64_t i = 0; i < static_cast<int64_t>(spec.params.size()); ++i) {
    const auto& n = spec.params[i].name;
    index[n] = i;
    const std::string wte = "wte.weight";
    if (n.size() >= wte.size() && n.compare(n.size() - wte.size(), wte.size(), wte) == 0) {
      prefix = n.substr(0, n.size() - wte.size());
      found = true;
    }
  }
  if (!found) {
    throw NowcastError(
        "nowcast graph: GPT-2 spec without 'wte.weight' (expected Hugging Face "
        "GPT-2 names: wte, wpe, h.{i}.ln_1, attn.c_attn, attn.c_proj, ln_2, "
        "mlp.c_fc, mlp.c_proj, ln_f)");
  }
  int64_t L = 0;
  while (index.count(prefix + "h." + std::to_string(L) + ".ln_1.weight")) ++L;
  static const char* kBlock[] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                 "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                 "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                 "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  std::set<std::string> expected;
  for (const char* n : {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"}) {
    expected.insert(prefix + n);
  }
  for (int64_t i = 0; i < L; ++i) {
    for (const char* n : kBlock) expected.insert(prefix + "h." + std::to_string(i) + "." + n);
  }
  std::string missing, unexpected;
  for (const auto& n : expected) {
    if (!index.count(n)) missing += (missing.empty() ? "" : ", ") + n;
  }
  for (const auto& [n, i] : index) {
    if (!expected.count(n)) unexpected += (unexpected.empty() ? "" : ", ") + n;
  }
  if (!missing.empty() || !unexpected.empty()) {
    throw NowcastError("nowcast graph: not a GPT-2 parameter set" +
                       (missing.empty() ? std::string() : "; missing: " + missing) +
                       (unexpected.empty() ? std::string() : "; unexpected: " + unexpected) +
                       " (an untied lm_head is not supported)");
  }
  auto param = [&](const std::string& rel) -> const NowcastParam& {
    return spec.params[index.at(prefix + rel)];
  };
  auto idx = [&](const std::string& rel) { return index.at(prefix + rel); };
  const auto& wte = param("wte.weight");
  const auto& wpe = param("wpe.weight");
  if (wte.shape.size() != 2 || wpe.shape.size() != 2 || wpe.shape[1] != wte.shape[1]) {
    throw NowcastError("nowcast graph: wte " + shape_str(wte.shape) + " and wpe " +
                       shape_str(wpe.shape) + " must be [vocab, C] and [positions, C]");
  }
  const int64_t V = wte.shape[0], C = wte.shape[1], P = wpe.shape[0], H = spec.n_head;
  if (H < 1 || C % H != 0) {
    throw NowcastError("nowcast graph: n_head " + std::to_string(H) + " must divide n_embd " +
                       std::to_string(C) + " (pass the model's n_head to nowcast_spec_gpt2)");
  }
  const int64_t d = C / H;
  auto check = [&](const std::string& rel, std::vector<int64_t> shape) {
    const auto& p = param(rel);
    if (p.shape != shape) {
      throw NowcastError("nowcast graph: '" + p.name + "' has shape " + shape_str(p.shape) +
                         ", expected " + shape_str(shape) + " for GPT-2 with n_embd " +
                         std::to_string(C) + " (Conv1D weights are [in, out])");
    }
  };
  for (int64_t i = 0; i < L; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* n : {"ln_1.weight", "ln_1.bias", "attn.c_proj.bias", "ln_2.weight",
                          "ln_2.bias", "mlp.c_proj.bias"}) {
      check(h + n, {C});
    }
    check(h + "attn.c_attn.weight", {C, 3 * C});
    check(h + "attn.c_attn.bias", {3 * C});
    check(h + "attn.c_proj.weight", {C, C});
    check(h + "mlp.c_fc.weight", {C, 4 * C});
    check(h + "mlp.c_fc.bias", {4 * C});
    check(h + "mlp.c_proj.weight", {4 * C, C});
    if (param(h + "attn.c_attn.weight").kind != ParamKind::kAttnQKV) {
      throw NowcastError("nowcast graph: '" + param(h + "attn.c_attn.weight").name +
                         "' must have kind kAttnQKV (q|k|v thirds)");
    }
  }
  check("ln_f.weight", {C});
  check("ln_f.bias", {C});

  struct Nodes {
    int64_t ln1w, ln1b, kb, x, heads, qb, vb, q, v, apb, ln2w, ln2b, xm, fcb, hid, mpb;
  };
  const int64_t tok = b.alloc(V), pos = b.alloc(P);
  std::vector<Nodes> blk(L);
  for (auto& n : blk) {
    n.ln1w = b.alloc(1), n.ln1b = b.alloc(1), n.kb = b.alloc(1), n.x = b.alloc(C);
    n.heads = b.alloc(H), n.qb = b.alloc(1), n.vb = b.alloc(1), n.q = b.alloc(C);
    n.v = b.alloc(C), n.apb = b.alloc(1), n.ln2w = b.alloc(1), n.ln2b = b.alloc(1);
    n.xm = b.alloc(C), n.fcb = b.alloc(1), n.hid = b.alloc(4 * C), n.mpb = b.alloc(1);
  }
  const int64_t lnfw = b.alloc(1), lnfb = b.alloc(1), x_final = b.alloc(C);
  auto type = [&](const std::string& rel) { return edge_type(param(rel).kind, param(rel)); };
  const int64_t kRes = static_cast<int64_t>(ParamKind::kResidual);
  const int64_t kHead = static_cast<int64_t>(ParamKind::kAttnHead);

  const int64_t x0 = L > 0 ? blk[0].x : x_final;
  b.weight(tok, V, x0, C, type("wte.weight"), idx("wte.weight"), 0, C, 1);
  b.weight(pos, P, x0, C, type("wpe.weight"), idx("wpe.weight"), 0, C, 1);
  for (int64_t i = 0; i < L; ++i) {
    const auto& n = blk[i];
    const int64_t x_next = i + 1 < L ? blk[i + 1].x : x_final;
    const std::string h = "h." + std::to_string(i) + ".";
    b.vector(n.ln1w, n.x, C, type(h + "ln_1.weight"), idx(h + "ln_1.weight"));
    b.vector(n.ln1b, n.x, C, type(h + "ln_1.bias"), idx(h + "ln_1.bias"));
    const int64_t w = idx(h + "attn.c_attn.weight"), bias = idx(h + "attn.c_attn.bias");
    const int64_t bias_type = type(h + "attn.c_attn.bias");
    // Query: X -> Q (element [r, o]), a node per head -> that head's Q neurons, q-bias -> Q.
    b.weight(n.x, C, n.q, C, static_cast<int64_t>(ParamKind::kAttnQuery), w, 0, 3 * C, 1);
    for (int64_t hd = 0; hd < H; ++hd) b.fixed(n.heads + hd, 1, n.q + hd * d, d, kHead, 1, 0);
    b.vector(n.qb, n.q, C, bias_type, bias, 0);
    // Key: element [r, C + o] points Q[o] -> X[r]; the key bias feeds X.
    b.weight(n.x, C, n.q, C, static_cast<int64_t>(ParamKind::kAttnKey), w, C, 3 * C, 1, 1,
             /*reversed=*/true);
    b.vector(n.kb, n.x, C, bias_type, bias, C);
    // Value: X -> V, heads -> V, v-bias -> V, and the attention's residual X -> Xm.
    b.weight(n.x, C, n.v, C, static_cast<int64_t>(ParamKind::kAttnValue), w, 2 * C, 3 * C, 1);
    for (int64_t hd = 0; hd < H; ++hd) b.fixed(n.heads + hd, 1, n.v + hd * d, d, kHead, 1, 0);
    b.vector(n.vb, n.v, C, bias_type, bias, 2 * C);
    b.fixed(n.x, C, n.xm, C, kRes, 1, 1);
    b.weight(n.v, C, n.xm, C, type(h + "attn.c_proj.weight"), idx(h + "attn.c_proj.weight"), 0, C,
             1);
    b.vector(n.apb, n.xm, C, type(h + "attn.c_proj.bias"), idx(h + "attn.c_proj.bias"));
    b.vector(n.ln2w, n.xm, C, type(h + "ln_2.weight"), idx(h + "ln_2.weight"));
    b.vector(n.ln2b, n.xm, C, type(h + "ln_2.bias"), idx(h + "ln_2.bias"));
    b.weight(n.xm, C, n.hid, 4 * C, type(h + "mlp.c_fc.weight"), idx(h + "mlp.c_fc.weight"), 0,
             4 * C, 1);
    b.vector(n.fcb, n.hid, 4 * C, type(h + "mlp.c_fc.bias"), idx(h + "mlp.c_fc.bias"));
    b.fixed(n.xm, C, x_next, C, kRes, 1, 1);  // the MLP's residual
    b.weight(n.hid, 4 * C, x_next, C, type(h + "mlp.c_proj.weight"), idx(h + "mlp.c_proj.weight"),
             0, C, 1);
    b.vector(n.mpb, x_next, C, type(h + "mlp.c_proj.bias"), idx(h + "mlp.c_proj.bias"));
  }
  b.vector(lnfw, x_final, C, type("ln_f.weight"), idx("ln_f.weight"));
  b.vector(lnfb, x_final, C, type("ln_f.bias"), idx("ln_f.bias"));
}

// Edge (i, o) of a block, i-major: i = e / cols (dense) or e / group; o = e % cols or e.
void block_indices(const EdgeBlock& b, at::Tensor& i, at::Tensor& o) {
  const auto opts = at::TensorOptions().dtype(at::kLong);
  if (b.group == 0) {
    i = at::arange(b.rows, opts).repeat_interleave(b.cols);
    o = at::arange(b.cols, opts).repeat({b.rows});
  } else {
    o = at::arange(b.cols, opts);
    i = at::div(o, b.group, "floor");
  }
}

}  // namespace

NeuralGraph build_neural_graph(const NowcastSpec& spec) {
  Builder b;
  if (spec.family == NowcastFamily::kFeedForward) {
    build_feedforward(b, spec);
  } else {
    build_gpt2(b, spec);
  }
  // Self-loops on every node, feature 2 (as the reference).
  b.fixed(0, b.g.nodes, 0, b.g.nodes, static_cast<int64_t>(ParamKind::kSelfLoop), 2, 1);
  return b.g;
}

EdgeTensors edge_tensors(const NeuralGraph& graph) {
  std::vector<at::Tensor> src, dst, type;
  for (const auto& b : graph.blocks) {
    at::Tensor i, o;
    block_indices(b, i, o);
    at::Tensor s = i + b.row0, t = o + b.col0;
    if (b.reversed) std::swap(s, t);
    src.push_back(s);
    dst.push_back(t);
    type.push_back(at::full({b.count()}, b.type, at::TensorOptions().dtype(at::kLong)));
  }
  return {at::cat(src), at::cat(dst), at::cat(type)};
}

at::Tensor feature_rows(const NeuralGraph& graph, const std::vector<int64_t>& param_offsets,
                        int64_t total_params) {
  const int64_t F = graph.features;
  const int64_t zero_row = total_params, one_row = total_params + 1, two_row = total_params + 2;
  std::vector<at::Tensor> parts;
  int64_t covered = 0;
  for (const auto& b : graph.blocks) {
    at::Tensor rows = at::full({b.count(), F}, zero_row, at::TensorOptions().dtype(at::kLong));
    if (b.param >= 0) {
      at::Tensor i, o;
      block_indices(b, i, o);
      const at::Tensor base =
          i * b.stride_row + o * b.stride_col + (param_offsets[b.param] + b.elem0);
      for (int64_t f = 0; f < b.kernel; ++f) rows.select(1, f).copy_(base + f);
      covered += b.count() * b.kernel;
    } else {
      rows.select(1, 0).fill_(b.value == 1 ? one_row : two_row);
    }
    parts.push_back(rows);
  }
  if (covered != total_params) {
    throw NowcastError("nowcast graph: internal error, the graph's parameter edges cover " +
                       std::to_string(covered) + " scalars of " + std::to_string(total_params));
  }
  return at::cat(parts);
}

}  // namespace ht::nowcast
