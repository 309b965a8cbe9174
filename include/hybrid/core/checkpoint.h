// What a checkpoint holds: named parts, each saved and loaded by the component that owns that
// state, and the one reader every use of a checkpoint (resume, eval, sample, info) goes through.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/data.h"
#include "hybrid/core/errors.h"

namespace torch {
namespace nn { class Module; }
namespace serialize { class OutputArchive; class InputArchive; }
}  // namespace torch

namespace ht {

// Checkpoint layout version, stored in every file. 2: one sub-archive per registered part.
// Version 1 files (parts and trainer fields mixed at the root) are refused with a message.
constexpr int64_t kCheckpointFormat = 2;

// A file read, CRC-checked and parsed once. Any failure to read it - missing, truncated, corrupt,
// a valid CRC over a broken archive, an unknown format - is a CheckpointError naming the file, so
// resuming falls back to the previous checkpoint for every kind of damage.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();

  const std::string& path() const { return path_; }
  int64_t file_bytes() const { return file_bytes_; }
  int64_t step() const { return step_; }
  const std::string& config_text() const { return config_text_; }
  const std::vector<std::string>& parts() const { return parts_; }
  bool has(const std::string& part) const;
  // The part's archive; CheckpointMismatch when the file has no such part.
  torch::serialize::InputArchive& part(const std::string& name) const;
  // "checkpoint '<path>'", the way messages name the file.
  std::string name() const { return "checkpoint '" + path_ + "'"; }

 private:
  std::string path_;
  int64_t file_bytes_ = 0;
  int64_t step_ = 0;
  std::string config_text_;
  std::vector<std::string> parts_;
  std::vector<std::unique_ptr<torch::serialize::InputArchive>> archives_;  // by part index
};

// One piece of training state in a checkpoint, saved and loaded by whoever owns that state.
struct CheckpointPart {
  std::string name;  // its key in the file: unique, e.g. "model", "optimizer", "strategy"
  std::string what;  // for messages, e.g. "the weight average"
  std::function<void(torch::serialize::OutputArchive&)> save;
  // Throws CheckpointMismatch naming what does not fit; other exceptions are wrapped in one.
  std::function<void(torch::serialize::InputArchive&)> load;
  // A file without this part: null means it does not fit the run (CheckpointMismatch); else this
  // runs instead of load (e.g. the weight average starts over, a run resumes with no history).
  std::function<void()> when_missing;
  // Checked before anything loads (e.g. every model tensor is there with its shape), so a
  // mismatch found here leaves the run as it was. Optional.
  std::function<void(torch::serialize::InputArchive&)> check;
};

// The parts of a run's checkpoints. save() writes every part; load() refuses a file that lacks a
// required part or holds one this run does not have (a hybrid checkpoint in a plain run), runs
// every check, then loads the parts in the order they were added.
class CheckpointRegistry {
 public:
  void add(CheckpointPart part);  // throws std::invalid_argument on a duplicate name
  // Serialises step, config and every part, and writes the file crash-safely (checkpoint_file.h).
  void save(const std::string& path, int64_t step, const std::string& config_text) const;
  void load(const CheckpointReader& file) const;

 private:
  std::vector<CheckpointPart> parts_;
};

// The model part: every named parameter and buffer of `module`. Loading checks that each of the
// module's tensors is in the file with its shape and that every tensor in the file belongs to
// the module (a checkpoint of a 4-layer model never loads into a 1-layer one), then copies in
// place, so optimizers and strategies keep pointing at the same storage.
CheckpointPart model_part(torch::nn::Module& module);

// What a checkpoint holds, read without building the model (for `hybrid-train info`).
struct CheckpointSummary {
  int64_t step = 0;
  std::string config_text;
  DataCursor cursor;
  int64_t file_bytes = 0;
  int64_t parameter_tensors = 0;
  int64_t parameter_elements = 0;
  std::string strategy;  // the step strategy's name; "" for plain training
  bool has_average = false;
  std::vector<std::string> parts;
};
CheckpointSummary inspect_checkpoint(const std::string& path);

// Copies a checkpoint's model tensors into `module` in place (for eval and sampling), with the
// model part's checks; the parameters from its weight average when it holds one and
// `prefer_average` is set.
void load_checkpoint_weights(const std::string& path, torch::nn::Module& module, bool prefer_average = true);

}  // namespace ht
