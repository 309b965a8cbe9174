// Tests of the WNN+ / NiNo nowcasting models: parity with the independent Python reference
// (fixtures from bench/python/make_nowcast_fixtures.py), error paths, and a trend sanity check.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/core/safetensors.h"
#include "hybrid/hybrid/nowcast.h"
#include "support/scratch_dir.h"

namespace {

const std::string kModels = std::string(HT_SOURCE_DIR) + "/models/nino/";
const std::string kWnn = kModels + "nino_mlp.safetensors";
const std::string kNino = kModels + "nino_no_posw.safetensors";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

struct Fixture {
  std::map<std::string, at::Tensor> t;
  std::map<std::string, std::string> meta;
  std::vector<std::string> names;
  ht::NowcastSpec spec;
  std::vector<std::vector<at::Tensor>> states;  // [param][5]

  explicit Fixture(const std::string& tag) {
    t = ht::load_safetensors(
        std::string(HT_SOURCE_DIR) + "/tests/hybrid/fixtures/nowcast_" + tag + ".safetensors",
        &meta);
    names = split(meta.at("params"));
    ht::NamedShapes shapes;
    for (const auto& n : names) {
      const at::Tensor s = t.at("states." + n);  // [5, *shape]
      shapes.emplace_back(n, s.sizes().slice(1).vec());
      std::vector<at::Tensor> seq;
      for (int64_t i = 0; i < s.size(0); ++i) seq.push_back(s[i].contiguous());
      states.push_back(seq);
    }
    spec = meta.at("family") == "gpt2"
               ? ht::nowcast_spec_gpt2(shapes, std::stoll(meta.at("n_head")))
               : ht::nowcast_spec_feedforward(shapes);
  }
  std::vector<int64_t> horizons(const std::string& model) const {
    std::vector<int64_t> ks;
    for (const auto& k : split(meta.at(model + "_k"))) ks.push_back(std::stoll(k));
    return ks;
  }
};

// Worst over tensors of max |ours - reference| / max |reference|.
double worst_relative(const Fixture& f, const std::vector<at::Tensor>& ours,
                      const std::string& prefix) {
  double worst = 0.0;
  for (size_t i = 0; i < f.names.size(); ++i) {
    const at::Tensor ref = f.t.at(prefix + f.names[i]);
    const double scale = std::max(ref.abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (ours[i] - ref).abs().max().item<double>() / scale);
  }
  return worst;
}

void check_parity(const std::string& tag) {
  Fixture f(tag);
  auto wnn = ht::load_wnn_plus(kWnn, f.spec);
  auto nino = ht::load_nino(kNino, f.spec);
  EXPECT_EQ(nino->graph_nodes(), std::stoll(f.meta.at("nodes")));
  EXPECT_EQ(nino->graph_edges(), std::stoll(f.meta.at("edges")));
  for (const char* model : {"wnn", "nino"}) {
    auto& m = std::string(model) == "wnn" ? *wnn : *nino;
    for (int64_t k : f.horizons(model)) {
      const double rel = worst_relative(f, m.predict(f.states, k),
                                        std::string(model) + ".k" + std::to_string(k) + ".");
      std::printf("[parity] %-4s %-4s k=%-2lld worst relative error %.2e\n", tag.c_str(), model,
                  static_cast<long long>(k), rel);
      EXPECT_LT(rel, 1e-5) << tag << " " << model << " k=" << k;
    }
  }
}

}  // namespace

TEST(NowcastParity, MLP) { check_parity("mlp"); }
TEST(NowcastParity, FM16) { check_parity("fm16"); }
TEST(NowcastParity, FlatteningCNN) { check_parity("cnn"); }
TEST(NowcastParity, GPT) { check_parity("gpt"); }

// The C++ side solves the eigenproblem on the twin-class quotient; the reference on the whole
// Laplacian. Canonical eigenvectors must agree.
TEST(NowcastGraph, LaplacianFeaturesMatchReference) {
  for (const char* tag : {"mlp", "fm16", "cnn", "gpt"}) {
    Fixture f(tag);
    const auto g = ht::describe_neural_graph(f.spec);
    EXPECT_TRUE(at::equal(g.degree, f.t.at("graph.degree"))) << tag;
    const double diff = (g.lpe - f.t.at("graph.lpe")).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << tag;
    EXPECT_LT(g.eigen_nodes, g.nodes) << tag << ": twin neurons should have been merged";
  }
}

// Hugging Face's "transformer." prefix changes nothing; a graph under 9 nodes gets zero-padded
// Laplacian features and still predicts.
TEST(NowcastGraph, PrefixedNamesAndTinyGraphs) {
  Fixture f("gpt");
  ht::NamedShapes prefixed;
  for (const auto& p : f.spec.params) prefixed.emplace_back("transformer." + p.name, p.shape);
  const auto a = ht::describe_neural_graph(f.spec);
  const auto b = ht::describe_neural_graph(ht::nowcast_spec_gpt2(prefixed, f.spec.n_head));
  EXPECT_TRUE(at::equal(a.src, b.src) && at::equal(a.dst, b.dst) && at::equal(a.lpe, b.lpe));

  const auto tiny = ht::nowcast_spec_feedforward({{"fc.weight", {2, 3}}, {"fc.bias", {2}}});
  EXPECT_EQ(ht::describe_neural_graph(tiny).nodes, 6);
  std::vector<std::vector<at::Tensor>> states;
  for (const auto& p : tiny.params) {
    std::vector<at::Tensor> seq;
    for (int t = 0; t < 5; ++t)
      seq.push_back(torch::full(p.shape, 0.1 * t) + torch::randn(p.shape));
    states.push_back(seq);
  }
  for (const auto& out : ht::load_nino(kNino, tiny)->predict(states, 3)) {
    EXPECT_EQ(at::isfinite(out).all().item<bool>(), true);
  }
}

// Chunking and writing the prediction over the current weights change nothing.
TEST(NowcastModel, ChunksAndInPlaceOutputGiveTheSameResult) {
  Fixture f("gpt");
  for (bool graph : {false, true}) {
    ht::NowcastOptions small;
    small.chunk_rows = 777;
    auto a = graph ? ht::load_nino(kNino, f.spec) : ht::load_wnn_plus(kWnn, f.spec);
    auto b = graph ? ht::load_nino(kNino, f.spec, small) : ht::load_wnn_plus(kWnn, f.spec, small);
    const auto ref = a->predict(f.states, 7);
    auto states = f.states;
    std::vector<at::Tensor> out;
    for (auto& s : states) {
      s.back() = s.back().clone();
      out.push_back(s.back());  // alias the current weights
    }
    b->predict(states, 7, out);
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_TRUE(at::allclose(out[i], ref[i], 1e-6, 1e-7)) << f.names[i] << " graph=" << graph;
    }
  }
}

// On a synthetic linear trajectory w_t = w_0 + t v both models step along v, further for a
// larger horizon.
TEST(NowcastModel, PredictionFollowsALinearTrend) {
  torch::manual_seed(0);
  const auto spec = ht::nowcast_spec_feedforward({{"fc1.weight", {24, 49}},
                                                  {"fc1.bias", {24}},
                                                  {"fc2.weight", {16, 24}},
                                                  {"fc2.bias", {16}},
                                                  {"fc3.weight", {10, 16}},
                                                  {"fc3.bias", {10}}});
  std::vector<std::vector<at::Tensor>> states;
  std::vector<at::Tensor> velocity;
  for (const auto& p : spec.params) {
    const at::Tensor w0 = torch::randn(p.shape) * 0.1, v = torch::randn(p.shape) * 0.01;
    std::vector<at::Tensor> seq;
    for (int t = 0; t < 5; ++t) seq.push_back(w0 + v * t);
    states.push_back(seq);
    velocity.push_back(v.flatten());
  }
  const at::Tensor v = at::cat(velocity);
  std::vector<std::unique_ptr<ht::NowcastModel>> models;
  models.push_back(ht::load_wnn_plus(kWnn, spec));
  models.push_back(ht::load_nino(kNino, spec));
  for (const auto& model : models) {
    double previous = 0.0;
    for (int64_t k : {1, 5}) {
      const auto pred = model->predict(states, k);
      std::vector<at::Tensor> steps;
      for (size_t i = 0; i < pred.size(); ++i) {
        const at::Tensor step = (pred[i] - states[i][4]).flatten();
        EXPECT_GT(torch::cosine_similarity(step, velocity[i], 0).item<double>(), 0.5)
            << model->name() << " k=" << k << " " << spec.params[i].name;
        steps.push_back(step);
      }
      const at::Tensor step = at::cat(steps);
      EXPECT_GT(torch::cosine_similarity(step, v, 0).item<double>(), 0.8) << model->name();
      const double along = (at::dot(step, v) / at::dot(v, v)).item<double>();  // in units of v
      EXPECT_GT(along, previous) << model->name() << " k=" << k;
      previous = along;
    }
  }
}

// ---- errors: each names the problem and the fix ----

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ht::NowcastError& e) {
    return e.what();
  }
  return "(no NowcastError)";
}

TEST(NowcastErrors, WeightFiles) {
  const Fixture f("mlp");
  EXPECT_NE(error_of([&] {
              ht::load_wnn_plus("/nonexistent/nino_mlp.safetensors", f.spec);
            }).find("models/nino/nino_mlp.safetensors"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { ht::load_nino(kModels + "missing.safetensors", f.spec); }).find("no file"),
      std::string::npos);
  EXPECT_NE(error_of([&] { ht::load_wnn_plus(kNino, f.spec); }).find("load_nino"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ht::load_nino(kWnn, f.spec); }).find("load_wnn_plus"),
            std::string::npos);

  ht::testing::ScratchDir dir;
  auto weights = ht::load_safetensors(kWnn);
  ht::NamedTensors changed;
  for (const auto& [name, t] : weights) {
    changed.emplace_back(name, name == "edge_mlp.fc.2.weight" ? at::zeros({128, 64}) : t);
  }
  ht::save_safetensors(dir.file("bad_shape.safetensors"), changed);
  const std::string shape_error =
      error_of([&] { ht::load_wnn_plus(dir.file("bad_shape.safetensors"), f.spec); });
  EXPECT_NE(shape_error.find("'edge_mlp.fc.2.weight' has shape [128, 64], expected [128, 128]"),
            std::string::npos)
      << shape_error;
  changed.erase(std::remove_if(changed.begin(), changed.end(),
                               [](const auto& p) { return p.first == "layer_embed.weight"; }),
                changed.end());
  ht::save_safetensors(dir.file("missing.safetensors"), changed);
  EXPECT_NE(error_of([&] {
              ht::load_wnn_plus(dir.file("missing.safetensors"), f.spec);
            }).find("'layer_embed.weight' is missing"),
            std::string::npos);
  std::FILE* junk = std::fopen(dir.file("junk.safetensors").c_str(), "wb");
  std::fputs("not a safetensors file", junk);
  std::fclose(junk);
  EXPECT_NE(
      error_of([&] { ht::load_nino(dir.file("junk.safetensors"), f.spec); }).find("header length"),
      std::string::npos);
}

TEST(NowcastErrors, Inputs) {
  const Fixture f("mlp");
  auto model = ht::load_wnn_plus(kWnn, f.spec);
  EXPECT_NE(error_of([&] { model->predict(f.states, 0); }).find("outside 1..40"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model->predict(f.states, 41); }).find("outside 1..40"),
            std::string::npos);
  auto four = f.states;
  four[2].pop_back();
  EXPECT_NE(error_of([&] {
              model->predict(four, 1);
            }).find("4 states given for 'fc2.weight'; wnn+ takes the last 5"),
            std::string::npos);
  auto bad_shape = f.states;
  bad_shape[0][3] = at::zeros({24, 48});
  EXPECT_NE(error_of([&] {
              model->predict(bad_shape, 1);
            }).find("state 3 of 'fc1.weight' has shape [24, 48] but the spec says [24, 49]"),
            std::string::npos);
  auto fewer = f.states;
  fewer.pop_back();
  EXPECT_NE(error_of([&] { model->predict(fewer, 1); }).find("built for 6 parameters"),
            std::string::npos);
  auto doubles = f.states;
  doubles[1][0] = doubles[1][0].to(at::kDouble);
  EXPECT_NE(error_of([&] { model->predict(doubles, 1); }).find("float32 CPU tensor"),
            std::string::npos);
}

TEST(NowcastErrors, Specs) {
  EXPECT_NE(error_of([] {
              ht::nowcast_spec_gpt2({{"wte.weight", {8, 4}}}, 0);
            }).find("n_head"),
            std::string::npos);
  // Layers listed out of order: fc2 takes 24 inputs but follows a 10-output layer.
  const auto shuffled = ht::nowcast_spec_feedforward(
      {{"fc1.weight", {24, 49}}, {"fc3.weight", {10, 16}}, {"fc2.weight", {16, 24}}});
  EXPECT_NE(error_of([&] { ht::load_nino(kNino, shuffled); }).find("model order"),
            std::string::npos);
  const auto big_kernel = ht::nowcast_spec_feedforward({{"conv.weight", {4, 1, 5, 5}}});
  EXPECT_NE(error_of([&] { ht::load_nino(kNino, big_kernel); }).find("at most 9 (3x3)"),
            std::string::npos);
  EXPECT_NO_THROW(ht::load_wnn_plus(kWnn, big_kernel));  // WNN+ works scalar by scalar
  Fixture g("gpt");
  auto untied = g.spec;
  untied.params.push_back({"lm_head.weight", {64, 24}, ht::ParamKind::kLinear});
  EXPECT_NE(error_of([&] { ht::load_nino(kNino, untied); }).find("unexpected: lm_head.weight"),
            std::string::npos);
  auto heads = g.spec;
  heads.n_head = 5;
  EXPECT_NE(error_of([&] { ht::load_nino(kNino, heads); }).find("must divide n_embd 24"),
            std::string::npos);
  ht::NowcastOptions tiny_eigen;
  tiny_eigen.max_eigen_nodes = 10;
  EXPECT_NE(error_of([&] { ht::load_nino(kNino, g.spec, tiny_eigen); }).find("use WNN+"),
            std::string::npos);
}

// Which kinds a jump moves: "all", or kinds joined by '+'; GPT-2's q/k/v thirds are one "attn".
TEST(JumpKinds, ParsesKindsJoinedByPlus) {
  const ht::JumpKinds all;
  EXPECT_TRUE(all.all());
  EXPECT_TRUE(all.moves(ht::ParamKind::kWordEmbedding));
  EXPECT_TRUE(ht::JumpKinds::parse("all").all());
  const auto matrices = ht::JumpKinds::parse("linear+attn+conv");
  EXPECT_FALSE(matrices.all());
  EXPECT_EQ(matrices.text(), "linear+attn+conv");
  for (const auto kind : {ht::ParamKind::kLinear, ht::ParamKind::kConv, ht::ParamKind::kAttnQKV,
                          ht::ParamKind::kAttnQuery, ht::ParamKind::kAttnValue})
    EXPECT_TRUE(matrices.moves(kind)) << static_cast<int>(kind);
  for (const auto kind : {ht::ParamKind::kBias, ht::ParamKind::kNorm, ht::ParamKind::kWordEmbedding,
                          ht::ParamKind::kPositionEmbedding})
    EXPECT_FALSE(matrices.moves(kind)) << static_cast<int>(kind);
  const auto norms = ht::JumpKinds::parse("norm");  // kNorm is 4: not attn's bit
  EXPECT_TRUE(norms.moves(ht::ParamKind::kNorm));
  EXPECT_FALSE(norms.moves(ht::ParamKind::kAttnQKV));
  EXPECT_NE(error_of([] { ht::JumpKinds::parse("linear+"); }).find("unknown kind \"\""), std::string::npos);
  EXPECT_NE(error_of([] { ht::JumpKinds::parse("embedding"); }).find("from linear, conv, bias, norm, wte, wpe, attn"),
            std::string::npos);
}
