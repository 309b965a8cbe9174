// Text generation without a KV cache: each new token reruns the cropped context, but only the
// last position goes through the LM head.
#include "hybrid/models/generate.h"

#include <limits>
#include <stdexcept>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "hybrid/core/objective.h"  // EvalModeGuard

namespace ht {

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              int64_t max_new_tokens, double temperature, int64_t top_k,
                              uint64_t seed, int64_t sample_below) {
  const auto& cfg = model.config();
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt needs at least one token");
  for (int64_t t : prompt) {
    if (t < 0 || t >= cfg.vocab_size) {
      throw std::invalid_argument("generate: prompt token " + std::to_string(t) +
                                  " is outside the vocabulary [0, " +
                                  std::to_string(cfg.vocab_size) + ")");
    }
  }
  if (max_new_tokens < 0 || temperature < 0.0 || top_k < 0) {
    throw std::invalid_argument("generate: max_new_tokens, temperature and top_k must be >= 0");
  }
  if (sample_below < 0 || sample_below > cfg.vocab_size) {
    throw std::invalid_argument("generate: sample_below " + std::to_string(sample_below) +
                                " is outside [0, " + std::to_string(cfg.vocab_size) + "]");
  }
  const int64_t V = sample_below > 0 ? sample_below : cfg.vocab_size;  // ids that may be drawn

  torch::NoGradGuard no_grad;
  EvalModeGuard eval_mode(model);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const c10::Device device = model.token_embedding().device();
  std::vector<int64_t> tokens = prompt;
  tokens.reserve(prompt.size() + max_new_tokens);
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), cfg.block_size);
    const auto ctx = torch::from_blob(tokens.data() + tokens.size() - T, {1, T}, torch::kLong).to(device);
    // The last position's hidden state, widened to fp32 under bf16 precision: one row against the
    // fp32 head is cheaper than rounding the whole [V, C] head to bf16 for every token.
    const auto h = model.hidden(ctx).select(1, T - 1).to(at::kFloat);  // [1, C]
    auto logits = at::mm(h, model.token_embedding().narrow(0, 0, V).t());  // [1, V]
    int64_t next;
    if (temperature == 0.0) {
      next = logits.argmax(-1).item<int64_t>();
    } else {
      logits.div_(temperature);
      if (top_k > 0 && top_k < V) {
        // Everything below the k-th largest logit gets probability 0.
        const auto kth = std::get<0>(logits.topk(top_k, -1)).narrow(1, top_k - 1, 1);  // [1, 1]
        logits.masked_fill_(logits < kth, -std::numeric_limits<float>::infinity());
      }
      const auto probs = at::softmax(logits, -1).cpu();  // [1, V]: drawn with the CPU generator, on any device
      next = at::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>();
    }
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace ht
