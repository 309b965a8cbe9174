// Every model in one place: its name, the data it trains on, its settings, how to build it with
// its objective and recompute seam, and its memory estimate. The CLI, `config --keys` and the
// planner read them from here; adding a model is one file and one line in model_registry.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/objective.h"
#include "hybrid/kernels/precision.h"
#include "hybrid/kernels/recompute.h"
#include "hybrid/models/memory_plan.h"

namespace ht {

enum class DataKind {
  Images,  // [B, 1, 28, 28] float images, [B] int64 labels (Fashion-MNIST)
  Tokens,  // [B, T] int64 token ids, [B, T] next tokens (text corpora)
};

// A model's own setting, e.g. GPT's n_layer. The CLI's key is "model.<key>".
struct ModelKey {
  std::string key;
  bool integer = true;                // integer, else a string (from `allowed` when that is set)
  std::string default_value;
  std::vector<std::string> allowed;   // string keys: the values it accepts (empty: any)
  double min = 0.0, max = 0.0;        // integer keys: inclusive range
  std::string help;
};

// The values of a run's model settings, by ModelKey::key (the CLI's Config behind it).
class ModelSettings {
 public:
  virtual ~ModelSettings() = default;
  virtual int64_t get_int(const std::string& key) const = 0;
  virtual std::string get_string(const std::string& key) const = 0;
};

// What the data says about the model it needs: token ids and sequence length (token models).
struct DataShape {
  int64_t vocab_size = 0;  // 0: unknown (building without data)
  int64_t context = 0;
};

// How to build: from pretrained weights where the settings name some (a fresh run; resumed runs
// get theirs from the checkpoint), and in which compute precision.
struct BuildOptions {
  bool pretrained = false;
  Precision precision = Precision::FP32;
};

// Indices [begin, end) along `dim` of the parameter `name` (as named_parameters() names it).
struct NamedSlice {
  std::string name;
  int64_t dim = 0, begin = 0, end = 0;
};

// A weight that fuses several linear maps side by side along its columns (GPT-2: c_attn.weight
// [C, 3C] is q | k | v), so that Muon orthogonalizes each map on its own.
struct FusedColumns {
  std::string name;
  int64_t blocks = 1;
};

// What Muon (kernels/muon.h) needs to know beyond "every matrix and conv kernel is a linear map".
struct MuonLayout {
  // Lookup tables (GPT: wte, whose rows the tied head also reads, and wpe): their rows are not a
  // linear map's, so they take AdamW's step.
  std::vector<std::string> lookup_tables;
  std::vector<FusedColumns> fused;
  // The matrices next to the data: the layer that reads the input and the head that writes the
  // logits (MLP: fc1, fc3). With optim.muon_hidden_only they take AdamW's step too - Jordan's
  // recipe (Muon for hidden layers only), which also spares the MLP its largest orthogonalization.
  // A GPT lists none: its input and its tied head are wte, a lookup table already.
  std::vector<std::string> input_output;
};

struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;
  std::unique_ptr<Objective> objective;
  std::string summary;  // one line, e.g. "gpt tiny: 4 layers, 4 heads, d 128, ..."
  // Sets activation recompute at `level` (Full: every n-th block), replacing what was in force.
  // Null when the model has no recompute seam.
  std::function<void(RecomputeLevel level, int64_t every_n_layers)> set_recompute;
  // For the weight nowcasters (hybrid/nowcast.h): "feedforward" (MLPs, CNNs) or "gpt2", and the
  // attention heads of a GPT, which the parameter shapes alone do not tell.
  std::string architecture = "feedforward";
  int64_t n_head = 0;
  // The weights that make the attention maps (GPT: the query and key columns of each block's
  // c_attn.weight), whose step optim.qk_update_scale scales. Empty: the model has no attention.
  std::vector<NamedSlice> attention_map_slices;
  MuonLayout muon;
};

struct ModelSpec {
  std::string name;  // model.kind
  std::string help;
  DataKind data = DataKind::Images;
  std::vector<ModelKey> keys;  // its own settings (keys another model declared are shared)
  bool bf16 = false;           // Precision::BF16 is implemented (others compute in fp32 only)
  // Builds the model, initialised from the global generator (seed it first). Throws OptionsError
  // for settings that do not fit the data.
  std::function<BuiltModel(const ModelSettings&, const DataShape&, const BuildOptions&)> build;
  // Peak tensor memory of a training step, as the tracking allocator counts it (memory_plan.h).
  std::function<MemoryEstimate(const ModelSettings&, const TrainShape&, const MemoryLevers&)> estimate;
};

const std::vector<ModelSpec>& model_registry();
const ModelSpec& find_model(const std::string& name);  // OptionsError listing the names otherwise

// The planner's estimate for a model: its analytic memory model (ModelSpec::estimate) where it
// has one, else one training step measured at the planned batch with the tracking allocator
// (small models; OptionsError if the allocator is not installed).
MemoryEstimate estimate_model_memory(const ModelSpec& spec, const ModelSettings& settings, const DataShape& data,
                                     const TrainShape& shape, const MemoryLevers& levers);

struct GPTConfig;
// GPT's preset with its overrides applied (the gpt entry's settings), validated.
GPTConfig gpt_config(const ModelSettings& settings);

}  // namespace ht
