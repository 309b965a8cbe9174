// The core's seam for data-parallel training: a process group seen as a few collectives, and the
// points of a step where the trainer hands gradients, checkpoints and checks to it. No c10d here.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/core/metrics.h"

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace ht {


// Who this process is among how many, and the collectives the trainer and the step strategies
// need. Every rank must make the same calls in the same order (a collective waits for all).
// The implementation turns a rank that died or hangs into an error naming it.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: every rank ends with the elementwise sum (max) over ranks.
  virtual void allreduce_sum(std::vector<at::Tensor>& tensors) = 0;
  virtual void allreduce_max(std::vector<at::Tensor>& tensors) = 0;
  // In place: every rank ends with root's tensors.
  virtual void broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  // Every rank's `tensor` (the same shape and type on each), indexed by rank.
  virtual std::vector<at::Tensor> all_gather(const at::Tensor& tensor) = 0;
  virtual void barrier() = 0;

  // Host values, through the collectives above (float64 on the CPU; a no-op for one process).
  // mean: sum(value * weight) / sum(weight), e.g. a loss over each rank's rows.
  double mean(double value, double weight = 1.0);
  double max(double value);
  bool any(bool flag);
  double broadcast_value(double value, int root = 0);
};

// One process: rank 0 of 1, every collective leaves its arguments as they are.
Collective& single_process();

// What the trainer calls at fixed points of a step when it trains data-parallel (the dist layer
// implements it: src/dist). A single process has none and runs exactly as before.
class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual Collective& collective() = 0;

  // Before each backward of a step. last: this backward completes the step's gradients (the last
  // micro-batch of the last accumulated batch), so their synchronisation may start while it runs;
  // earlier backwards only accumulate locally.
  virtual void before_backward(bool last) = 0;
  // After the last backward: waits until every gradient is averaged over ranks. local_loss is
  // this rank's mean loss; returns the global one. Throws c10::OutOfMemoryError when another rank
  // ran out of memory in this step, so that every rank takes the memory ladder together.
  virtual double finish_backward(double local_loss) = 0;
  // This rank's forward or backward ran out of memory: completes the step's collectives, so the
  // other ranks' finish_backward returns, and tells them (they throw as above).
  virtual void abort_backward() = 0;

  // Checkpoints: the "rng" part holds rank 0's generator as in any run; these add every rank's
  // (gathered in before_checkpoint) and restore this rank's, so the file stays loadable by a
  // single process and by any number of ranks.
  virtual void save_rank_states(torch::serialize::OutputArchive& archive) = 0;
  virtual void load_rank_states(torch::serialize::InputArchive& archive) = 0;
  // Around every save, on every rank: before compares the replicas' weights (a mismatch throws)
  // and gathers what is sharded; only the writer (rank 0) writes; after waits until it has.
  virtual void before_checkpoint(int64_t step) = 0;
  virtual bool writes_checkpoints() const = 0;
  virtual void after_checkpoint() = 0;
  // After a checkpoint was loaded on every rank: every rank resumed from the same step.
  virtual void after_resume(int64_t step) = 0;
  // After every step, on every rank: the periodic comparison of the replicas' weights.
  virtual void after_step(int64_t step) = 0;
  // Adds what the step communicated to its record (rec.extra: comm_bytes, comm_wait_ms, ...).
  virtual void annotate(StepRecord& record) = 0;
};

}  // namespace ht
