// GPT-2 weights as safetensors files, compatible with Hugging Face `gpt2` checkpoints
// (model.safetensors of gpt2, gpt2-medium, gpt2-large, gpt2-xl) in both directions.
#pragma once

#include <string>

#include "hybrid/models/gpt.h"

namespace ht {

// Copies every parameter from the file in place (under NoGradGuard). Accepts names with or
// without a "transformer." prefix; ignores the attn.bias / attn.masked_bias mask buffers; accepts
// lm_head.weight only if it equals wte.weight (the head is tied). F16/BF16 files are converted.
// Throws SafetensorsError listing every missing key, unexpected key and shape mismatch by name;
// on error the model is left untouched.
void load_gpt2_weights(GPT& model, const std::string& path);

// Writes the parameters under their HF names (no prefix, no lm_head), as float32.
void save_gpt2_weights(const GPT& model, const std::string& path);

}  // namespace ht
