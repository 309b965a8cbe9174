// Builds what a CLI command needs from a Config: model, objective, data, optimizer, trainer
// options. The only place that knows which config keys map to which library objects.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "config.h"
#include "hybrid/hybrid/nowcast_strategy.h"
#include "hybrid/hybrid/options.h"
#include "hybrid/core/trainer.h"
#include "hybrid/kernels/recompute.h"
#include "hybrid/models/model_registry.h"

namespace ht {
class GPT;
struct GPTConfig;
namespace dist {
class ProcessGroup;
class ShardedData;
}  // namespace dist
}

namespace ht::cli {

// A data set that cannot be read (missing package or file): exit code 3. The library's type.
using DataError = ht::DataError;

struct Session {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<GPT> gpt;  // set when model.kind = gpt
  std::unique_ptr<Objective> objective;
  std::unique_ptr<DataSource> data;  // null when built without data
  std::unique_ptr<Optimizer> optimizer;
  c10::Device device = c10::Device(c10::kCPU);  // run.device: the model and its optimizer state live here
  std::string model_summary;  // one line, e.g. "gpt tiny: 4 layers, d 128, 0.80M parameters"
  std::string data_summary;
  bool byte_level = false;        // tokens are bytes: prompts and samples are plain text
  // The model's recompute seam (null: it has none), and what the nowcasters need to know of it.
  std::function<void(RecomputeLevel, int64_t)> set_model_recompute;
  std::string architecture = "feedforward";
  int64_t n_head = 0;
  std::vector<NamedSlice> attention_map_slices;  // BuiltModel's: optim.qk_update_scale acts on them
  // train.precision = bf16 on a CPU without bf16 instructions: what to tell the user (or "").
  std::string precision_warning;
  std::string recompute = "none";  // the activation recompute level in force
  bool recompute_forced = false;  // the memory ladder turned on full recompute: phases keep it
  dist::ShardedData* shard = nullptr;  // data-parallel: this rank's view of `data`
};

// load_init_from: start the GPT from model.init_from. Only a fresh `train` wants it; eval, sample
// and a resumed run take every weight from the checkpoint (and need not find that file again).
// group: a data-parallel run's process group; the data then serves this rank's rows of every
// global batch, and with dist.shard_optimizer the optimizer is ZeRO-1 AdamW.
Session build_session(const Config& config, bool with_data, bool load_init_from = true,
                      dist::ProcessGroup* group = nullptr);
// Data-parallel: the trainer's hooks (gradient buckets, checksums, checkpoints) from the dist.*
// keys, into options.parallel. Broadcasts rank 0's weights; call before building the Trainer.
void set_data_parallel(Session& session, const Config& config, dist::ProcessGroup& group, TrainerOptions& options,
                       Logger* logger);
// The model.* keys as the model registry's settings (the Config must outlive them).
std::unique_ptr<ModelSettings> model_settings(const Config& config);
// model.preset with the model.* overrides applied, model.attention and train.precision
// (validated: ConfigError names the key).
GPTConfig gpt_config(const Config& config);
// "" unless train.precision = bf16 on a CPU without bf16 instructions: then the warning to print.
std::string precision_check(const Config& config);
// Sets activation recompute for the session's GPT to `level` ("none" | "selective" | "full"),
// replacing whatever was in force; returns false when there is no GPT. Used at start-up, per
// phase (MemoryPressureOptions::on_phase) and by the memory-pressure ladder.
bool set_recompute(Session& session, const std::string& level, int64_t every_n_layers);
// The level configured for a phase ("warmup" | "full" | "correct"): memory.recompute_<phase>,
// or memory.recompute where that says "inherit".
std::string recompute_for_phase(const Config& config, const std::string& phase);
// Wires recompute into the trainer: per phase (MemoryPressureOptions::on_phase) and as rung 2 of
// the memory-pressure ladder, which turns on full recompute for good. Both must outlive the trainer.
void set_recompute_hooks(Session& session, const Config& config, TrainerOptions& options);
TrainerOptions trainer_options(const Config& config);
// A library option error ("AdamWOptions.beta1 = 1: must be in [0, 1)") as a config error that
// names the key instead ("optim.beta1 = 1: ..."): the library keeps its own vocabulary.
ConfigError config_error(const std::exception& library_error);
// The hybrid.* keys as the engine's options, validated (ConfigError naming the key).
HybridOptions hybrid_options(const Config& config);
// run.device, checked against what this LibTorch and machine have (ConfigError otherwise).
c10::Device run_device(const Config& config);
// The nowcast.* keys as the strategy's options, validated, for a model of this architecture
// (BuiltModel::architecture, n_head); nowcast.weights defaults to models/<its weights_file> in the source tree.
NowcastStrategyOptions nowcast_options(const Config& config, const std::string& architecture, int64_t n_head);
// The step strategy run.mode asks for: null for plain, the hybrid engine, Lookahead or nowcast.
// Nowcast reads the model's architecture from the session; without one, from model.kind.
std::unique_ptr<StepStrategy> build_strategy(const Config& config, const Session* session = nullptr);
std::string checkpoint_dir(const Config& config);
// The trainer callbacks the optim.* keys ask for (optim.qk_update_scale != 1: the attention maps'
// update scaled); empty when none. ConfigError when the model has no attention maps to scale.
std::vector<std::shared_ptr<Callback>> build_callbacks(const Config& config, const Session& session);

}  // namespace ht::cli
