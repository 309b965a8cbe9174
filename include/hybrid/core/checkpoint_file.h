// Crash-safe checkpoint files: temp file, fsync, rename, directory fsync, CRC32 of the payload.
// A truncated or corrupt file is detected on read and reported with its path and the reason.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ht {

// The file cannot be used: missing, truncated, corrupt, or its write failed.
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

void write_checkpoint_file(const std::string& path, const std::string& payload);
std::string read_checkpoint_file(const std::string& path);  // throws CheckpointError

// A file named like a checkpoint that list_checkpoints leaves out, and why (for a warning).
struct SkippedCheckpoint {
  std::string path;
  std::string reason;
};

// Checkpoints in `dir` named ckpt-<step>.ht, newest first. Names whose step does not parse (past
// 64 bits) are left out; `skipped`, when given, receives them (the library does not print).
std::vector<std::string> list_checkpoints(const std::string& dir, std::vector<SkippedCheckpoint>* skipped = nullptr);
std::string checkpoint_path(const std::string& dir, int64_t step);
// Deletes all but the newest `keep_last` checkpoints at or below `just_written`'s step; keeps
// `just_written` itself and every checkpoint with a higher step (another run's, or one a hybrid
// rollback has since rewound past): pruning never deletes what it cannot place behind the new file.
void prune_checkpoints(const std::string& dir, int keep_last, const std::string& just_written);

}  // namespace ht
