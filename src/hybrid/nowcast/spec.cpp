// Building NowcastSpecs: parameter kinds from shapes (MLP/CNN) or from GPT-2's Hugging Face names.
// The neural graph checks the structure; here only what a single parameter can tell.
#include <algorithm>
#include <string>

#include <torch/nn/module.h>

#include "hybrid/hybrid/nowcast.h"

namespace ht {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

NamedShapes named_shapes(const torch::nn::Module& module) {
  NamedShapes out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value().sizes().vec());
  }
  return out;
}

int JumpKinds::kind_bit(ParamKind kind) {
  switch (kind) {
    case ParamKind::kAttnQKV:  // c_attn's thirds are one parameter: they move together
    case ParamKind::kAttnQuery:
    case ParamKind::kAttnKey:
    case ParamKind::kAttnValue: return 31;
    default: return static_cast<int>(kind);  // 0 .. 13
  }
}

JumpKinds JumpKinds::parse(const std::string& text) {
  static const std::pair<const char*, ParamKind> kNames[] = {
      {"linear", ParamKind::kLinear}, {"conv", ParamKind::kConv}, {"bias", ParamKind::kBias},
      {"norm", ParamKind::kNorm}, {"wte", ParamKind::kWordEmbedding}, {"wpe", ParamKind::kPositionEmbedding},
      {"attn", ParamKind::kAttnQKV}};
  JumpKinds kinds;
  if (text == "all") return kinds;
  kinds.mask_ = 0;
  kinds.text_ = text;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find('+', begin), text.size());
    const std::string name = text.substr(begin, end - begin);
    bool known = false;
    for (const auto& [n, kind] : kNames)
      if (name == n) kinds.mask_ |= 1u << kind_bit(kind), known = true;
    if (!known)
      throw NowcastError("jump kinds \"" + text + "\": unknown kind \"" + name +
                         "\"; write \"all\" or kinds joined by '+' from linear, conv, bias, norm, wte, wpe, attn");
    begin = end + 1;
  }
  return kinds;
}

NowcastSpec nowcast_spec_feedforward(const NamedShapes& params) {
  NowcastSpec spec;
  spec.family = NowcastFamily::kFeedForward;
  for (const auto& [name, shape] : params) {
    ParamKind kind;
    if (shape.size() == 4) {
      kind = ParamKind::kConv;
    } else if (shape.size() == 2) {
      kind = ParamKind::kLinear;
    } else if (shape.size() == 1) {
      kind = ends_with(name, ".weight") ? ParamKind::kNorm : ParamKind::kBias;
    } else {
      throw NowcastError("nowcast spec: parameter '" + name + "' has shape " + shape_str(shape) +
                         "; a feed-forward model may hold 1-D (bias, norm), 2-D (Linear) and "
                         "4-D (Conv2d) parameters only");
    }
    spec.params.push_back({name, shape, kind});
  }
  if (spec.params.empty()) throw NowcastError("nowcast spec: the model has no parameters");
  return spec;
}

NowcastSpec nowcast_spec_gpt2(const NamedShapes& params, int64_t n_head) {
  if (n_head < 1) {
    throw NowcastError(
        "nowcast spec: GPT-2 needs its number of attention heads (n_head >= 1, "
        "from the model's config); got " +
        std::to_string(n_head));
  }
  NowcastSpec spec;
  spec.family = NowcastFamily::kGPT2;
  spec.n_head = n_head;
  for (const auto& [name, shape] : params) {
    ParamKind kind;
    if (ends_with(name, "wte.weight")) {
      kind = ParamKind::kWordEmbedding;
    } else if (ends_with(name, "wpe.weight")) {
      kind = ParamKind::kPositionEmbedding;
    } else if (ends_with(name, "attn.c_attn.weight")) {
      kind = ParamKind::kAttnQKV;
    } else if (shape.size() == 1) {
      kind = ends_with(name, ".weight") ? ParamKind::kNorm : ParamKind::kBias;
    } else if (shape.size() == 2) {
      kind = ParamKind::kLinear;
    } else {
      throw NowcastError("nowcast spec: GPT-2 parameter '" + name + "' has shape " +
                         shape_str(shape) + "; expected 1-D or 2-D");
    }
    spec.params.push_back({name, shape, kind});
  }
  if (spec.params.empty()) throw NowcastError("nowcast spec: the model has no parameters");
  return spec;
}

}  // namespace ht
