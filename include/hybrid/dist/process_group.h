// A c10d process group (Gloo on CPU; NCCL only when built against a CUDA LibTorch) behind
// ht::Collective: rendezvous through a TCPStore, timeouts, and failures that name the rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "hybrid/core/metrics.h"
#include "hybrid/core/parallel.h"

namespace ht::dist {

// A rank died, hangs, failed, or the replicas' weights differ. The message names the rank and
// says what to do (rerunning the command resumes from the last checkpoint).
class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a torchrun-style launcher sets: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT. Without WORLD_SIZE (or with 1) the run is a single process.
struct DistEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // processes on this machine (threads are shared among them)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool distributed() const { return world_size > 1; }
};
// Reads the variables above; OptionsError names a variable with a bad value (RANK >= WORLD_SIZE,
// a port out of range, RANK set without MASTER_ADDR ...).
DistEnvironment environment_from_env();

struct ProcessGroupOptions {
  DistEnvironment env;
  std::string backend = "gloo";   // "gloo" (CPU tensors) or "nccl" (CUDA LibTorch builds only)
  double timeout_seconds = 120;   // a collective (and the rendezvous) waiting longer fails
  double heartbeat_seconds = 1;   // how often each rank tells the store it is alive
  int gloo_threads = 2;           // Gloo's worker threads (they run collectives beside compute)
};

// What went over the wire, for benchmarks: payload of every collective, the bytes this rank
// sends under the ring algorithms Gloo uses (allreduce 2(N-1)/N of the payload, all-gather and
// gather (N-1)/N of the whole), and the time the calling thread spent waiting on them.
struct CommStats {
  int64_t collectives = 0;
  int64_t payload_bytes = 0;
  int64_t sent_bytes = 0;
  double wait_seconds = 0.0;
};

// An in-flight collective (the gradient buckets run several while backward goes on).
class PendingWork {
 public:
  virtual ~PendingWork() = default;
};

class ProcessGroup : public Collective {
 public:
  // Rendezvous: rank 0 hosts a TCPStore on MASTER_ADDR:MASTER_PORT, the others connect; then
  // the backend's process group is built over it and a heartbeat thread starts. DistributedError
  // when the rendezvous fails (names the address and the timeout).
  static std::unique_ptr<ProcessGroup> create(const ProcessGroupOptions& options, Logger* logger = nullptr);
  ~ProcessGroup() override;

  int rank() const override;
  int world_size() const override;
  void allreduce_sum(std::vector<at::Tensor>& tensors) override;
  void allreduce_max(std::vector<at::Tensor>& tensors) override;
  void broadcast(std::vector<at::Tensor>& tensors, int root) override;
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor) override;
  void barrier() override;

  // Asynchronous sum (gradient buckets) and all-gather into equal slices (ZeRO's parameters);
  // wait() throws DistributedError naming the rank that failed, with `what` for context.
  std::unique_ptr<PendingWork> start_allreduce_sum(at::Tensor tensor);
  std::unique_ptr<PendingWork> start_all_gather(at::Tensor input, std::vector<at::Tensor> outputs);
  void wait(PendingWork& work, const std::string& what);
  // Every rank's `input` concatenated on `root` (into `output`, [N x input] elements); the other
  // ranks' `output` is untouched.
  void gather(const at::Tensor& input, at::Tensor& output, int root);

  // Posts this rank's failure for the others to name in their error (call before exiting).
  void report_failure(const std::string& message);
  // A normal end: waits for every rank, so none exits while another still needs the store.
  void shutdown();

  const std::string& backend() const;
  const ProcessGroupOptions& options() const;
  CommStats stats() const;
  void reset_stats();
  // What stage the run is in ("gradient allreduce at step 12"): named in failure messages.
  void set_context(const std::string& where);

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  void run(const std::string& what, const std::function<void()>& op);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::dist
