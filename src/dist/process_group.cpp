// The c10d process group: TCPStore rendezvous, Gloo (or NCCL) collectives, a heartbeat per rank
// in the store, and the diagnosis that turns a failed collective into "rank 1 stopped responding".
#include "hybrid/dist/process_group.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <torch/version.h>
#if defined(HT_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "hybrid/core/errors.h"

namespace ht::dist {
namespace {

// LibTorch 2.x made the backends (Gloo, NCCL) c10d::Backend subclasses; in 1.13 they are
// ProcessGroups. The collectives used here have the same signatures in both.
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000.0)); }

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    throw OptionsError(std::string("environment variable ") + name + "=" + v + " must be an integer in [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(x);
}

std::string hb_key(int rank) { return "ht/heartbeat/" + std::to_string(rank); }
std::string error_key(int rank) { return "ht/error/" + std::to_string(rank); }

std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

int64_t nbytes(const std::vector<at::Tensor>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

struct Work final : PendingWork {
  c10::intrusive_ptr<c10d::Work> work;
  int64_t payload = 0;
  int64_t sent = 0;
};

}  // namespace

DistEnvironment environment_from_env() {
  DistEnvironment e;
  e.world_size = env_int("WORLD_SIZE", 1, 1, 1 << 20);
  e.rank = env_int("RANK", 0, 0, e.world_size - 1);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size, 1, e.world_size);
  e.local_rank = env_int("LOCAL_RANK", e.rank % e.local_world_size, 0, e.local_world_size - 1);
  e.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) {
    e.master_addr = a;
  } else if (e.world_size > 1 && e.local_world_size < e.world_size) {
    throw OptionsError("WORLD_SIZE=" + std::to_string(e.world_size) + " spans several machines but MASTER_ADDR is not set: "
                       "set it to the address of the machine that runs rank 0");
  }
  return e;
}

struct ProcessGroup::Impl {
  ProcessGroupOptions opt;
  Logger* logger = nullptr;
  std::string backend;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<BackendBase> pg;
  // The heartbeat has its own store connection: the main thread may be blocked in one.
  c10::intrusive_ptr<c10d::TCPStore> beat_store;
  std::mutex beat_mutex;  // guards beat_store (the heartbeat thread and diagnose() share it)
  std::thread beat_thread;
  std::mutex stop_mutex;
  std::condition_variable stop_cv;
  bool stopping = false;

  mutable std::mutex stats_mutex;
  CommStats stats;
  std::string context;
  std::string failure;  // set once a collective failed: later ones fail at once with it

  int rank() const { return opt.env.rank; }
  int world() const { return opt.env.world_size; }
  std::string address() const { return opt.env.master_addr + ":" + std::to_string(opt.env.master_port); }

  void beat_loop() {
    const auto interval = ms(opt.heartbeat_seconds);
    std::unique_lock<std::mutex> lock(stop_mutex);
    while (!stopping) {
      lock.unlock();
      try {
        std::lock_guard<std::mutex> g(beat_mutex);
        beat_store->add(hb_key(rank()), 1);
      } catch (...) {
        // The store is gone (rank 0 ended or died): the main thread finds out in its own calls.
      }
      lock.lock();
      stop_cv.wait_for(lock, interval, [&] { return stopping; });
    }
  }

  void stop_heartbeat() {
    {
      std::lock_guard<std::mutex> lock(stop_mutex);
      stopping = true;
    }
    stop_cv.notify_all();
    if (beat_thread.joinable()) beat_thread.join();
  }

  // Heartbeat counters of every rank: add(key, 0) reads without blocking on a missing key.
  std::vector<int64_t> beats() {
    std::lock_guard<std::mutex> g(beat_mutex);
    std::vector<int64_t> n(static_cast<size_t>(world()));
    for (int r = 0; r < world(); ++r) n[static_cast<size_t>(r)] = beat_store->add(hb_key(r), 0);
    return n;
  }

  std::string reported_failure() {
    std::lock_guard<std::mutex> g(beat_mutex);
    for (int r = 0; r < world(); ++r) {
      if (r == rank() || !beat_store->check({error_key(r)})) continue;
      const auto v = beat_store->get(error_key(r));
      return "rank " + std::to_string(r) + " failed: " + std::string(v.begin(), v.end());
    }
    return "";
  }

  // Why a collective failed, naming the rank: one that reported its own error, else one whose
  // heartbeat stopped, else (every rank alive) one that is stuck or slow.
  std::string diagnose(const std::string& what, const std::string& error) {
    std::string where = what;
    if (!context.empty()) where += " (" + context + ")";
    const std::string rerun = " Rerun the same command to resume from the last checkpoint.";
    try {
      std::string reported = reported_failure();
      if (!reported.empty()) return reported + "; rank " + std::to_string(rank()) + " stopped in " + where + "." + rerun;
      // Wait three heartbeats: a dead or frozen rank's counter stands still.
      const double window = 3.0 * opt.heartbeat_seconds;
      const std::vector<int64_t> before = beats();
      std::this_thread::sleep_for(ms(window));
      reported = reported_failure();
      if (!reported.empty()) return reported + "; rank " + std::to_string(rank()) + " stopped in " + where + "." + rerun;
      const std::vector<int64_t> after = beats();
      std::string stale;
      for (int r = 0; r < world(); ++r)
        if (r != rank() && after[static_cast<size_t>(r)] == before[static_cast<size_t>(r)])
          stale += (stale.empty() ? "" : ", ") + std::to_string(r);
      std::ostringstream os;
      os.precision(3);
      if (!stale.empty()) {
        os << "rank " << stale << " stopped responding during " << where << ": no heartbeat for " << window
           << " s (its process died, was killed or is frozen; rank " << rank() << " saw: " << error << ")." << rerun;
      } else {
        os << where << " failed on rank " << rank() << ": " << error
           << ". Every rank still sends heartbeats, so one is stuck or far slower than the others "
              "(dist.timeout is "
           << opt.timeout_seconds << " s: raise it if steps can take that long)." << rerun;
      }
      return os.str();
    } catch (const std::exception& e) {
      if (rank() == 0) return where + " failed on rank 0: " + error + " (the store does not answer: " + e.what() + ")." + rerun;
      return "rank 0 stopped responding during " + where + ": the rendezvous store it hosts at " + address() +
             " does not answer (rank 0's process died or its machine is unreachable; rank " + std::to_string(rank()) +
             " saw: " + error + ")." + rerun;
    }
  }

  void count(int64_t payload, int64_t sent) {
    std::lock_guard<std::mutex> g(stats_mutex);
    ++stats.collectives;
    stats.payload_bytes += payload;
    stats.sent_bytes += sent;
  }
  void waited(double seconds) {
    std::lock_guard<std::mutex> g(stats_mutex);
    stats.wait_seconds += seconds;
  }
  // Bytes this rank sends for a payload of n bytes under the ring algorithms.
  int64_t ring_allreduce(int64_t n) const { return 2 * n * (world() - 1) / world(); }
  int64_t ring_gather(int64_t total) const { return total * (world() - 1) / world(); }
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() {
  impl_->stop_heartbeat();
}

std::unique_ptr<ProcessGroup> ProcessGroup::create(const ProcessGroupOptions& options, Logger* logger) {
  const DistEnvironment& env = options.env;
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size)
    throw OptionsError("process group: rank " + std::to_string(env.rank) + " of world size " +
                       std::to_string(env.world_size) + " is not a rank of it");
  if (!(options.timeout_seconds > 0) || !(options.heartbeat_seconds > 0))
    throw OptionsError("process group: timeout and heartbeat must be > 0 seconds");
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  impl->logger = logger;
  impl->backend = options.backend;
  const std::string addr = impl->address();
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = env.world_size;
    so.waitWorkers = true;
    so.timeout = ms(options.timeout_seconds);
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    impl->store = tcp;
    c10d::TCPStoreOptions beat = so;
    beat.isServer = false;
    beat.numWorkers = c10::nullopt;
    beat.waitWorkers = false;
    impl->beat_store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, beat);
  } catch (const std::exception& e) {
    throw DistributedError(
        "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ": rendezvous at " + addr +
        " failed within " + std::to_string(static_cast<int>(options.timeout_seconds)) + " s (" + e.what() +
        "). Every rank needs the same MASTER_ADDR and MASTER_PORT, rank 0 must be able to listen there and "
        "the others to reach it, and all WORLD_SIZE ranks must start");
  }
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("pg", impl->store);
    if (options.backend == "gloo") {
      auto o = c10d::ProcessGroupGloo::Options::create(ms(options.timeout_seconds));
      // GLOO_SOCKET_IFNAME picks the network interface as in PyTorch; a loopback master means
      // one machine; otherwise the address this machine's hostname resolves to.
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (is_loopback(env.master_addr))
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      o->threads = std::max(1, options.gloo_threads);
      impl->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, env.rank, env.world_size, o);
    } else if (options.backend == "nccl") {
#if defined(HT_WITH_NCCL)
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = ms(options.timeout_seconds);
      impl->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, env.rank, env.world_size, o);
#else
      throw OptionsError("dist.backend = nccl needs a LibTorch built with CUDA (HT_WITH_CUDA); this build is CPU-only: use gloo");
#endif
    } else {
      throw OptionsError("dist.backend = " + options.backend + ": use gloo (CPU) or nccl (CUDA builds)");
    }
  } catch (const OptionsError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError("rank " + std::to_string(env.rank) + ": the " + options.backend +
                           " process group could not connect every rank through " + addr + " (" + e.what() +
                           "). On several machines set GLOO_SOCKET_IFNAME to the interface the others reach");
  }
  std::unique_ptr<ProcessGroup> group(new ProcessGroup(std::move(impl)));
  Impl* raw = group->impl_.get();
  raw->beat_thread = std::thread([raw] { raw->beat_loop(); });
  if (logger)
    logger->on_message(Level::Info, "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                                         " joined through " + addr + " (" + options.backend + ")");
  return group;
}

int ProcessGroup::rank() const { return impl_->rank(); }
int ProcessGroup::world_size() const { return impl_->world(); }
const std::string& ProcessGroup::backend() const { return impl_->backend; }
const ProcessGroupOptions& ProcessGroup::options() const { return impl_->opt; }

CommStats ProcessGroup::stats() const {
  std::lock_guard<std::mutex> g(impl_->stats_mutex);
  return impl_->stats;
}

void ProcessGroup::reset_stats() {
  std::lock_guard<std::mutex> g(impl_->stats_mutex);
  impl_->stats = CommStats{};
}

void ProcessGroup::set_context(const std::string& where) { impl_->context = where; }

void ProcessGroup::run(const std::string& what, const std::function<void()>& op) {
  if (!impl_->failure.empty()) throw DistributedError(impl_->failure);
  const auto t0 = Clock::now();
  try {
    op();
  } catch (const OptionsError&) {
    throw;
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    impl_->failure = impl_->diagnose(what, e.what());
    throw DistributedError(impl_->failure);
  }
  impl_->waited(std::chrono::duration<double>(Clock::now() - t0).count());
}

namespace {

// Enqueues a collective. A backend that refuses it (a tensor on the wrong device, a type it
// lacks) is this rank's own error, found before any peer is involved: no diagnosis of peers.
template <typename F>
c10::intrusive_ptr<c10d::Work> enqueue(const std::string& backend, int rank, const std::string& what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw DistributedError("rank " + std::to_string(rank) + ": the " + backend + " backend refused " + what + ": " +
                           e.what());
  }
}

// NCCL reduces device tensors only: host values (the step's agreement, losses, checksums) are
// staged through the rank's GPU and copied back.
struct Staged {
  std::vector<at::Tensor> device;  // what the backend sees
  std::vector<at::Tensor> host;    // the caller's tensors, refreshed by done()
  Staged(std::vector<at::Tensor>& ts, bool stage, int local_rank) : host(ts) {
    for (const auto& t : ts)
      device.push_back(stage && t.is_cpu() ? t.to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank))) : t);
  }
  void done() {
    for (size_t i = 0; i < host.size(); ++i)
      if (!device[i].is_same(host[i])) host[i].copy_(device[i]);
  }
};

}  // namespace

void ProcessGroup::allreduce_sum(std::vector<at::Tensor>& tensors) {
  impl_->count(nbytes(tensors), impl_->ring_allreduce(nbytes(tensors)));
  Staged st(tensors, impl_->backend == "nccl", impl_->opt.env.local_rank);
  auto w = enqueue(backend(), rank(), "an allreduce", [&] { return impl_->pg->allreduce(st.device); });
  run("an allreduce", [&] { w->wait(); });
  st.done();
}

void ProcessGroup::allreduce_max(std::vector<at::Tensor>& tensors) {
  impl_->count(nbytes(tensors), impl_->ring_allreduce(nbytes(tensors)));
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  Staged st(tensors, impl_->backend == "nccl", impl_->opt.env.local_rank);
  auto w = enqueue(backend(), rank(), "an allreduce", [&] { return impl_->pg->allreduce(st.device, o); });
  run("an allreduce", [&] { w->wait(); });
  st.done();
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int root) {
  impl_->count(nbytes(tensors), impl_->ring_gather(nbytes(tensors)));
  c10d::BroadcastOptions o;
  o.rootRank = root;
  o.rootTensor = 0;
  const std::string what = "a broadcast from rank " + std::to_string(root);
  Staged st(tensors, impl_->backend == "nccl", impl_->opt.env.local_rank);
  auto w = enqueue(backend(), rank(), what, [&] { return impl_->pg->broadcast(st.device, o); });
  run(what, [&] { w->wait(); });
  st.done();
}

std::vector<at::Tensor> ProcessGroup::all_gather(const at::Tensor& tensor) {
  std::vector<at::Tensor> in{tensor.contiguous()};
  Staged st(in, impl_->backend == "nccl", impl_->opt.env.local_rank);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_size(); ++r) out[0].push_back(at::empty_like(st.device[0]));
  const int64_t total = nbytes(in) * world_size();
  impl_->count(total, impl_->ring_gather(total));
  auto w = enqueue(backend(), rank(), "an all-gather", [&] { return impl_->pg->allgather(out, st.device); });
  run("an all-gather", [&] { w->wait(); });
  for (auto& t : out[0]) t = t.to(tensor.device());
  return out[0];
}

void ProcessGroup::gather(const at::Tensor& input, at::Tensor& output, int root) {
  std::vector<at::Tensor> in{input.contiguous()};
  Staged st(in, impl_->backend == "nccl", impl_->opt.env.local_rank);
  std::vector<std::vector<at::Tensor>> out;
  at::Tensor staged_out;
  if (rank() == root) {
    staged_out = st.device[0].is_same(in[0]) ? output : output.to(st.device[0].device());
    out.resize(1);
    const int64_t n = input.numel();
    for (int r = 0; r < world_size(); ++r)
      out[0].push_back(staged_out.view({-1}).narrow(0, r * n, n).view(input.sizes()));
  }
  const int64_t total = nbytes(in) * world_size();
  impl_->count(total, rank() == root ? 0 : nbytes(in));
  c10d::GatherOptions o;
  o.rootRank = root;
  const std::string what = "a gather to rank " + std::to_string(root);
  auto w = enqueue(backend(), rank(), what, [&] { return impl_->pg->gather(out, st.device, o); });
  run(what, [&] { w->wait(); });
  if (rank() == root && !staged_out.is_same(output)) output.copy_(staged_out);
}

void ProcessGroup::barrier() {
  impl_->count(0, 0);
  auto w = enqueue(backend(), rank(), "a barrier", [&] { return impl_->pg->barrier(); });
  run("a barrier", [&] { w->wait(); });
}

std::unique_ptr<PendingWork> ProcessGroup::start_allreduce_sum(at::Tensor tensor) {
  if (!impl_->failure.empty()) throw DistributedError(impl_->failure);
  auto w = std::make_unique<Work>();
  std::vector<at::Tensor> ts{std::move(tensor)};
  w->payload = nbytes(ts);
  w->sent = impl_->ring_allreduce(w->payload);
  impl_->count(w->payload, w->sent);
  w->work = enqueue(backend(), rank(), "the gradient allreduce", [&] { return impl_->pg->allreduce(ts); });
  return w;
}

std::unique_ptr<PendingWork> ProcessGroup::start_all_gather(at::Tensor input, std::vector<at::Tensor> outputs) {
  if (!impl_->failure.empty()) throw DistributedError(impl_->failure);
  auto w = std::make_unique<Work>();
  std::vector<at::Tensor> in{std::move(input)};
  std::vector<std::vector<at::Tensor>> out{std::move(outputs)};
  w->payload = nbytes(in) * world_size();
  w->sent = impl_->ring_gather(w->payload);
  impl_->count(w->payload, w->sent);
  w->work = enqueue(backend(), rank(), "the parameter all-gather", [&] { return impl_->pg->allgather(out, in); });
  return w;
}

void ProcessGroup::wait(PendingWork& work, const std::string& what) {
  auto& w = static_cast<Work&>(work);
  if (!w.work) return;
  run(what, [&] { w.work->wait(); });
  w.work.reset();
}

void ProcessGroup::report_failure(const std::string& message) {
  try {
    std::lock_guard<std::mutex> g(impl_->beat_mutex);
    impl_->beat_store->set(error_key(rank()), bytes_of(message));
  } catch (...) {
    // Nobody left to tell.
  }
}

void ProcessGroup::shutdown() {
  barrier();
  impl_->stop_heartbeat();
}

}  // namespace ht::dist
