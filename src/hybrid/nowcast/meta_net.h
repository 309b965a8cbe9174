// The WNN+ network as a set of trainable tensors (meta_train.cpp and loss_tune.cpp train it; the
// inference model of wnn_plus.cpp reads the file they write), under load_wnn_plus's names.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "hybrid/hybrid/nowcast.h"

namespace ht::nowcast {

struct MetaNet {
  at::Tensor embed, w_in, b_in, w[3], b[3], w_out, b_out;

  std::vector<at::Tensor> all() const { return {embed, w_in, b_in, w[0], b[0], w[1], b[1], w[2], b[2], w_out, b_out}; }

  std::map<std::string, at::Tensor> named() const {
    std::map<std::string, at::Tensor> m;
    m["layer_embed.weight"] = embed;
    m["edge_proj.fc.0.weight"] = w_in;
    m["edge_proj.fc.0.bias"] = b_in;
    for (int l = 0; l < 3; ++l) {
      m["edge_mlp.fc." + std::to_string(2 * l) + ".weight"] = w[l];
      m["edge_mlp.fc." + std::to_string(2 * l) + ".bias"] = b[l];
    }
    m["edge_mlp.fc.6.weight"] = w_out;
    m["edge_mlp.fc.6.bias"] = b_out;
    return m;
  }

  static MetaNet from(const std::map<std::string, at::Tensor>& m) {
    auto get = [&](const std::string& n) {
      const auto it = m.find(n);
      if (it == m.end()) throw NowcastError("WNN+ weights: tensor '" + n + "' is missing");
      return it->second.to(at::kFloat);
    };
    MetaNet net;
    net.embed = get("layer_embed.weight");
    net.w_in = get("edge_proj.fc.0.weight");
    net.b_in = get("edge_proj.fc.0.bias");
    for (int l = 0; l < 3; ++l) {
      net.w[l] = get("edge_mlp.fc." + std::to_string(2 * l) + ".weight");
      net.b[l] = get("edge_mlp.fc." + std::to_string(2 * l) + ".bias");
    }
    net.w_out = get("edge_mlp.fc.6.weight");
    net.b_out = get("edge_mlp.fc.6.bias");
    return net;
  }

  // PyTorch's defaults (Linear: U(+-1/sqrt(fan_in)), Embedding: N(0, 1)); the output layer starts
  // at zero, so the untrained model predicts "no change" (the last state) for every horizon.
  static MetaNet init(int64_t h, int64_t horizons, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    auto uni = [&](std::vector<int64_t> shape, int64_t fan_in) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      return at::empty(shape, at::kFloat).uniform_(-bound, bound, gen);
    };
    MetaNet net;
    net.embed = at::empty({15, h}, at::kFloat).normal_(0.0, 1.0, gen);
    net.w_in = uni({h, kNowcastContext}, kNowcastContext);
    net.b_in = uni({h}, kNowcastContext);
    for (int l = 0; l < 3; ++l) {
      net.w[l] = uni({h, h}, h);
      net.b[l] = uni({h}, h);
    }
    net.w_out = at::zeros({horizons, h}, at::kFloat);
    net.b_out = at::zeros({horizons}, at::kFloat);
    return net;
  }

  // WNN+'s forward (wnn_plus.cpp), all horizons: [N, 5] normalised states, [N] kinds -> [N, H].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& kind) const {
    at::Tensor h = at::addmm(b_in, x, w_in.t()) + embed.index_select(0, kind);
    for (int l = 0; l < 3; ++l) h = at::silu(at::addmm(b[l], h, w[l].t()));
    return x.select(1, kNowcastContext - 1).unsqueeze(1) + at::addmm(b_out, h, w_out.t());
  }
};

}  // namespace ht::nowcast
