// Autoregressive sampling from a GPT: greedy, temperature and top-k, reproducible from a seed.
#pragma once

#include <cstdint>
#include <vector>

#include "hybrid/models/gpt.h"

namespace ht {

// Returns the prompt followed by max_new_tokens sampled tokens. Runs under NoGradGuard in eval
// mode (the model's training flag is restored). The context is cropped to the last block_size
// tokens. temperature == 0 picks the argmax (greedy); otherwise logits / temperature are sampled,
// restricted to the top_k most likely tokens when top_k > 0. The seed fixes the draws: the same
// model, prompt and seed give the same tokens. sample_below > 0 draws only ids below it: a
// byte-level model built with a larger vocabulary (a GPT-2 preset on text bytes) passes 256, so
// its ids that no byte maps to are never produced. Throws std::invalid_argument on an empty
// prompt, token ids outside the vocabulary, negative temperature or top_k, or sample_below
// outside [0, vocab_size].
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              int64_t max_new_tokens, double temperature = 1.0,
                              int64_t top_k = 0, uint64_t seed = 0, int64_t sample_below = 0);

}  // namespace ht
