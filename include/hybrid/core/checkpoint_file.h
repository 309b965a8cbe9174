// Crash-safe checkpoint files: temp file, fsync, rename, directory fsync, CRC32 of the payload.
// A truncated or corrupt file is detected on read and reported with its path and the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hybrid/core/errors.h"

namespace ht {

void write_checkpoint_file(const std::string& path, const std::string& payload);
std::string read_checkpoint_file(const std::string& path);  // throws CheckpointError

// Checkpoints in `dir` named ckpt-<step>.ht, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
std::string checkpoint_path(const std::string& dir, int64_t step);
// Deletes all but the newest `keep_last` checkpoints at or below `just_written`'s step; keeps
// `just_written` itself and every checkpoint with a higher step (another run's, or one a hybrid
// rollback has since rewound past): pruning never deletes what it cannot place behind the new file.
void prune_checkpoints(const std::string& dir, int keep_last, const std::string& just_written);

}  // namespace ht
