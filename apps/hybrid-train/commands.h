// The CLI's subcommands. Each returns a process exit code; errors are thrown and mapped to exit
// codes in main.cpp (see ExitCode).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace ht::cli {

// Memory ran out outside the trainer's pressure ladder (loading data, building the model, loading
// a checkpoint): exit 5 like the ladder's end, with memory.budget named; nothing needed saving.
class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The budget in force, for messages: "memory.budget = 65.0 MiB" or that there is none.
std::string memory_budget_text();

enum ExitCode : int {
  kOk = 0,
  kTrainingFailed = 1,   // divergence (NaN/Inf), a failed metrics write, or another runtime failure
  kBadUsage = 2,         // flags, config keys, values of the wrong type or out of range
  kDataUnavailable = 3,  // a data set or file that cannot be read
  kBadCheckpoint = 4,    // a checkpoint that cannot be read or written, or does not fit
  kOutOfMemory = 5,      // memory ladder exhausted (an emergency checkpoint was written), or
                         // out of memory before training (data, model, checkpoint loading)
  kPlanDoesNotFit = 6,   // plan: the config's estimated peak exceeds the budget
  kDistributedFailure = 7,  // data-parallel: a rank died, hung or failed, or the replicas' weights
                            // differ (the message names the rank; rerun to resume)
  kInterrupted = 130,    // SIGINT/SIGTERM: stopped after saving a checkpoint (or in start-up)
};

struct SampleOptions {
  std::string prompt;
  int64_t tokens = -1;       // -1: from the config
  double temperature = -1;   // -1: from the config
  int64_t top_k = -1;        // -1: from the config
  uint64_t seed = 0;
};

// config_and_overrides: an optional .toml path first, then key=value overrides.
// Under a launcher (WORLD_SIZE > 1 in the environment) this process is one rank of a
// data-parallel run; `--nproc N` starts N of them locally first (launch.h).
int run_train(const std::vector<std::string>& config_and_overrides);
// `train --nproc N`: validates the config once, then launches the N ranks.
int run_train_launcher(int nproc, const std::vector<std::string>& config_and_overrides);
// "[rank 1] " in a data-parallel rank's messages, "" otherwise.
const std::string& rank_prefix();
int run_eval(const std::string& checkpoint, const std::vector<std::string>& overrides);
int run_sample(const std::string& checkpoint, const SampleOptions& options);
int run_info(const std::string& checkpoint);
// budget: a size ("8GiB", bytes, fraction of RAM); empty = memory.budget from the config.
// nproc > 1: also one rank's memory in a data-parallel run of that many processes.
int run_plan(const std::vector<std::string>& config_and_overrides, const std::string& budget, int nproc = 1);
int run_config(const std::vector<std::string>& config_and_overrides, bool list_keys);

}  // namespace ht::cli
