// GPT-2 checkpoint import/export. Names are matched exactly (after dropping "transformer."), and
// every problem is collected first so one error message tells the whole story.
#include "hybrid/models/gpt_weights.h"

#include <set>

#include <torch/torch.h>

#include "hybrid/core/safetensors.h"

namespace ht {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_string(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// What the file's own shapes say its configuration is, to point at the right preset.
std::string describe_file_config(const std::map<std::string, at::Tensor>& tensors) {
  int64_t n_layer = 0;
  for (const auto& [name, t] : tensors) {
    if (name.rfind("h.", 0) != 0) continue;
    const auto dot = name.find('.', 2);
    try {
      n_layer = std::max<int64_t>(n_layer, std::stoll(name.substr(2, dot - 2)) + 1);
    } catch (const std::exception&) {
    }
  }
  std::string s = "the file holds " + std::to_string(n_layer) + " layers";
  if (auto it = tensors.find("wte.weight"); it != tensors.end() && it->second.dim() == 2) {
    s += ", vocab_size " + std::to_string(it->second.size(0)) + ", n_embd " +
         std::to_string(it->second.size(1));
  }
  if (auto it = tensors.find("wpe.weight"); it != tensors.end() && it->second.dim() == 2) {
    s += ", block_size " + std::to_string(it->second.size(0));
  }
  return s;
}

}  // namespace

void load_gpt2_weights(GPT& model, const std::string& path) {
  const auto file = load_safetensors(path);
  std::map<std::string, at::Tensor> tensors;  // HF names without the "transformer." prefix
  std::vector<std::string> problems;
  at::Tensor lm_head;
  for (const auto& [key, t] : file) {
    const std::string prefix = "transformer.";
    const std::string name = key.rfind(prefix, 0) == 0 ? key.substr(prefix.size()) : key;
    // The causal-mask buffers HF stores in older checkpoints; we build our own mask.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
    if (name == "lm_head.weight") {
      lm_head = t;
      continue;
    }
    if (!tensors.emplace(name, t).second) {
      problems.push_back(name + ": present both with and without the \"transformer.\" prefix");
    }
  }

  const auto params = model.named_parameters(/*recurse=*/true);
  std::vector<std::string> missing, mismatched;
  for (const auto& item : params) {
    auto it = tensors.find(item.key());
    if (it == tensors.end()) {
      missing.push_back(item.key());
    } else if (it->second.sizes() != item.value().sizes()) {
      mismatched.push_back(item.key() + ": file has " + shape_string(it->second.sizes()) +
                           ", model expects " + shape_string(item.value().sizes()));
    } else if (!at::isFloatingType(it->second.scalar_type())) {
      problems.push_back(item.key() + ": stored as " +
                         std::string(c10::toString(it->second.scalar_type())) +
                         ", expected a floating-point dtype");
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : tensors) {
    if (!params.contains(name)) unexpected.push_back(name);
  }
  if (lm_head.defined()) {
    auto wte = tensors.find("wte.weight");
    if (wte != tensors.end() && !(lm_head.sizes() == wte->second.sizes() &&
                                  at::equal(lm_head.to(at::kFloat), wte->second.to(at::kFloat)))) {
      problems.push_back("lm_head.weight differs from wte.weight, but this GPT ties its LM head "
                         "to wte: an untied checkpoint cannot be loaded");
    }
  }

  if (!missing.empty() || !mismatched.empty() || !unexpected.empty() || !problems.empty()) {
    std::string msg = "cannot load GPT-2 weights from '" + path + "':";
    const auto list = [&msg](const std::string& title, const std::vector<std::string>& items) {
      if (items.empty()) return;
      msg += "\n  " + title + " (" + std::to_string(items.size()) + "):";
      const size_t shown = std::min<size_t>(items.size(), 12);
      for (size_t i = 0; i < shown; ++i) msg += "\n    " + items[i];
      if (shown < items.size()) {
        msg += "\n    ... and " + std::to_string(items.size() - shown) + " more";
      }
    };
    list("shape mismatches", mismatched);
    list("missing from the file", missing);
    list("unexpected in the file", unexpected);
    list("other problems", problems);
    if (!mismatched.empty() || !missing.empty() || !unexpected.empty()) {
      const auto& c = model.config();
      msg += "\n  " + describe_file_config(tensors) + "; the model has " +
             std::to_string(c.n_layer) + " layers, vocab_size " + std::to_string(c.vocab_size) +
             ", n_embd " + std::to_string(c.n_embd) + ", block_size " +
             std::to_string(c.block_size) + " - is the config the right preset?";
    }
    throw SafetensorsError(msg);
  }

  torch::NoGradGuard no_grad;
  for (const auto& item : params) {
    auto p = item.value();
    p.copy_(tensors.at(item.key()));
  }
}

void save_gpt2_weights(const GPT& model, const std::string& path) {
  NamedTensors tensors;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    tensors.emplace_back(item.key(), item.value().detach().to(at::kFloat));
  }
  save_safetensors(path, tensors, {{"format", "pt"}});
}

}  // namespace ht
