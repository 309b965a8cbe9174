// Data-parallel training over a ProcessGroup: gradients averaged in buckets that start while
// backward runs, each rank's shard of every global batch, ZeRO-1 AdamW, replica checksums.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hybrid/core/data.h"
#include "hybrid/core/optimizer.h"
#include "hybrid/core/parallel.h"
#include "hybrid/dist/process_group.h"
#include "hybrid/kernels/optimizers.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ht::dist {

struct DataParallelOptions {
  // Gradients are summed in buckets of about this many bytes (DDP's 25 MB), the first one
  // smaller (DDP's 1 MB) so that communication starts early in backward.
  int64_t bucket_bytes = 25 << 20;
  int64_t first_bucket_bytes = 1 << 20;
  // Start each bucket's allreduce from the gradient hooks as soon as it is complete (DDP). Off:
  // all buckets start after backward (for measuring what the overlap gains).
  bool overlap = true;
  // Compare a checksum of the weights across ranks every this many steps (0: only at checkpoints).
  int64_t checksum_every = 100;
  // Rank r > 0 reseeds its CPU generator from (seed, r) once the weights are broadcast, so ranks
  // draw different dropout masks; rank 0 keeps the stream a single process would have.
  uint64_t seed = 0;
};

// Every rank draws the same global batch (the cursor is global: one position in checkpoints)
// and keeps its rows: rank r of N gets the r-th of N nearly equal row ranges (tensor_split).
// Validation batches pass through whole; the trainer shares them out by index. Probe batches are
// cut into rows like training batches.
class ShardedData final : public DataSource {
 public:
  ShardedData(std::unique_ptr<DataSource> global, int rank, int world_size);
  Batch next_train_batch() override;
  DataCursor cursor() const override { return global_->cursor(); }
  void restore(const DataCursor& cursor) override { global_->restore(cursor); }
  int64_t num_val_batches() const override { return global_->num_val_batches(); }
  Batch val_batch(int64_t index) const override { return global_->val_batch(index); }
  // Probe batches are shared out like training batches: a verdict averages the ranks' losses.
  int64_t num_probe_batches() const override { return global_->num_probe_batches(); }
  Batch probe_batch(int64_t index) const override { return my_rows(global_->probe_batch(index)); }
  // The global batch's items: rank 0's throughput figures are the job's.
  int64_t items_per_batch() const override { return global_->items_per_batch(); }
  const char* item_name() const override { return global_->item_name(); }
  // This rank's rows over the global batch's, for the last batch drawn: its gradient's weight.
  double share() const { return share_; }
  DataSource& global() { return *global_; }

 private:
  Batch my_rows(const Batch& global_batch) const;

  std::unique_ptr<DataSource> global_;
  int rank_;
  int world_;
  double share_;
};

// ZeRO stage 1 AdamW: the parameters, flattened in order, are cut into N equal ranges; this rank
// keeps both moments of its range only (8/N bytes per parameter instead of 8), updates its range
// from the averaged gradients and all-gathers the parameters in windows (at most bucket_bytes in
// flight and an eighth of a range, whose buffers cost (N + 1) / 8 of a range). Same
// maths as make_adamw, element for element. Checkpoints hold the moments gathered to rank 0 in
// make_adamw's layout (DataParallel::before_checkpoint gathers them), so a checkpoint loads into
// sharded and unsharded runs and into any number of ranks.
std::unique_ptr<Optimizer> make_zero_adamw(std::vector<at::Tensor> params, const AdamWOptions& options,
                                           ProcessGroup& group, int64_t bucket_bytes = 25 << 20);

// What a data-parallel trainer needs (TrainerOptions::parallel). Built after the model and the
// optimizer, before the Trainer: broadcasts rank 0's weights and buffers to every rank, hooks
// the parameters' gradient accumulators, and reseeds ranks > 0 (DataParallelOptions::seed).
// data: the run's ShardedData (its share weights the gradients); optimizer: the run's, possibly
// make_zero_adamw's. Both must outlive the result.
std::shared_ptr<DataParallel> make_data_parallel(ProcessGroup& group, torch::nn::Module& module, Optimizer& optimizer,
                                                 const ShardedData& data, const DataParallelOptions& options,
                                                 Logger* logger = nullptr);

// A 64-bit checksum of the tensors' bytes (position-sensitive, the same for any thread count):
// cheap enough to compare replicas every few steps (one pass over the weights).
uint64_t weight_checksum(const std::vector<at::Tensor>& tensors);

}  // namespace ht::dist
