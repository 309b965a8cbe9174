// One error type per kind of failure, so a caller (the CLI's exit codes, a user's catch) can
// tell a bad setting from bad data, a bad checkpoint, a failed run or exhausted memory.
#pragma once

#include <stdexcept>
#include <string>

namespace ht {

// Options or a setup that cannot work (a range, a missing allocator, an optimizer over another
// model's parameters). Derives from std::invalid_argument, which validate() functions threw.
class OptionsError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A data set that cannot be read: missing file or package, corrupt or inconsistent contents.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A checkpoint that cannot be used: missing, truncated, corrupt, unreadable, or its write failed.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The file is sound but does not fit what loads it (another model, optimizer or training mode):
// an older checkpoint of the same directory would not fit either, so resuming does not fall back.
class CheckpointMismatch : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Training cannot go on: a non-finite loss or gradient, a loss function that fails, an update
// that ran out of memory half-way. The message names the step.
class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown after the memory-pressure ladder is exhausted; the emergency checkpoint holds all progress.
class OutOfMemoryExit : public TrainingError {
 public:
  OutOfMemoryExit(const std::string& msg, std::string checkpoint)
      : TrainingError(msg), checkpoint_path(std::move(checkpoint)) {}
  std::string checkpoint_path;
};

}  // namespace ht
