// `hybrid-train train --nproc N`: starts N local ranks of this binary, as torchrun would, and
// watches them; the exit code and a line per failed rank say which one failed and how.
#pragma once

#include <string>
#include <vector>

namespace ht::cli {

// Runs `hybrid-train train <train_args>` N times with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT set, forwards SIGINT and
// SIGTERM to them, and returns 0 when all succeed, else the exit code of the first rank that
// failed (kDistributedFailure for one killed by a signal). Ranks still running grace_seconds
// after the first failure are terminated.
int launch_local(int nproc, const std::vector<std::string>& train_args, double grace_seconds);

}  // namespace ht::cli
