// Each rank's rows of every global batch: the data source (and its cursor) stays global, so a
// checkpoint holds one position and any number of ranks replays the same global batches.
#include <stdexcept>

#include "hybrid/core/errors.h"
#include "hybrid/dist/data_parallel.h"

namespace ht::dist {

ShardedData::ShardedData(std::unique_ptr<DataSource> global, int rank, int world_size)
    : global_(std::move(global)), rank_(rank), world_(world_size), share_(1.0 / world_size) {
  if (!global_) throw OptionsError("ShardedData: no data source to shard");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw OptionsError("ShardedData: rank " + std::to_string(rank) + " is not a rank of " + std::to_string(world_size));
}

// This rank's rows of a global batch. tensor_split: the first rows % N ranks get one row more.
// Copied, so the global batch is freed and a rank holds only its rows (as the planner counts them).
Batch ShardedData::my_rows(const Batch& b) const {
  const int64_t rows = b.input.size(0);
  if (rows < world_)
    throw OptionsError("a global batch of " + std::to_string(rows) + " rows cannot be shared by " +
                       std::to_string(world_) + " ranks: raise data.batch_size to at least the number of processes");
  return {b.input.tensor_split(world_)[static_cast<size_t>(rank_)].clone(),
          b.target.defined() ? b.target.tensor_split(world_)[static_cast<size_t>(rank_)].clone() : b.target};
}

Batch ShardedData::next_train_batch() {
  Batch b = global_->next_train_batch();
  Batch mine = my_rows(b);
  share_ = static_cast<double>(mine.input.size(0)) / static_cast<double>(b.input.size(0));
  return mine;
}

}  // namespace ht::dist
