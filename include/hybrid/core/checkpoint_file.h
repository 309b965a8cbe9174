// Crash-safe checkpoint files: temp file, fsync, rename, directory fsync, CRC32 of the payload.
// A truncated or corrupt file is detected on read and reported with its path and the reason.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ht {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void write_checkpoint_file(const std::string& path, const std::string& payload);
std::string read_checkpoint_file(const std::string& path);  // throws CheckpointError

// Checkpoints in `dir` named ckpt-<step>.ht, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
std::string checkpoint_path(const std::string& dir, int64_t step);
void prune_checkpoints(const std::string& dir, int keep_last);

}  // namespace ht
