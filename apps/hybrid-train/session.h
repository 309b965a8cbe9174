// Builds what a CLI command needs from a Config: model, objective, data, optimizer, trainer
// options. The only place that knows which config keys map to which library objects.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "config.h"
#include "hybrid/core/trainer.h"

namespace ht {
class GPT;
struct GPTConfig;
}

namespace ht::cli {

// A data set that cannot be read (missing package or file): exit code 3.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Session {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<GPT> gpt;  // set when model.kind = gpt
  std::unique_ptr<Objective> objective;
  std::unique_ptr<DataSource> data;  // null when built without data
  std::unique_ptr<Optimizer> optimizer;
  std::string model_summary;  // one line, e.g. "gpt tiny: 4 layers, d 128, 0.80M parameters"
  std::string data_summary;
  bool byte_level = false;
  bool flash_attention = false;  // model.attention = flash  // tokens are bytes: prompts and samples are plain text
};

Session build_session(const Config& config, bool with_data);
// model.preset with the model.* overrides applied (validated).
GPTConfig gpt_config(const Config& config);
// Turns on activation recompute for the session's GPT at `level` ("selective" | "full"); returns
// false when there is no GPT. Used at start-up (memory.recompute) and by the memory-pressure ladder.
bool enable_recompute(Session& session, const std::string& level, int64_t every_n_layers);
TrainerOptions trainer_options(const Config& config);
// The step strategy run.mode asks for: null for plain, the hybrid engine, or Lookahead.
std::unique_ptr<StepStrategy> build_strategy(const Config& config);
std::string checkpoint_dir(const Config& config);

}  // namespace ht::cli
