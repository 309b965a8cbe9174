// Cost of one weight-nowcasting prediction (WNN+, NiNo): setup (weights, graph, Laplacian), time
// and peak tensor workspace per prediction, on the tiny GPT, a 6 x 256 GPT and FM-16.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "hybrid/core/allocator.h"
#include "hybrid/core/runtime.h"
#include "hybrid/core/safetensors.h"
#include "hybrid/hybrid/nowcast.h"
#include "hybrid/models/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }


struct Task {
  std::string name;
  ht::NowcastSpec spec;
  std::vector<at::Tensor> weights;  // current values, spec order
};

Task gpt_task(const std::string& name, int64_t layers, int64_t heads, int64_t width,
              int64_t vocab = 256, int64_t context = 128) {
  ht::GPTConfig c = ht::gpt_preset("tiny");
  c.n_layer = layers, c.n_head = heads, c.n_embd = width, c.vocab_size = vocab;
  c.block_size = context;
  ht::GPT gpt(c);
  Task t{name, ht::nowcast_spec_gpt2(ht::named_shapes(gpt), heads), {}};
  for (const auto& p : gpt.named_parameters()) t.weights.push_back(p.value().detach().clone());
  return t;
}

// NiNo's FM-16 task: convs 1->16 (stride 2), 16->32, 32->32 (3x3), global average pooling, 32->10.
Task fm16_task() {
  const ht::NamedShapes shapes = {{"fc.0.weight", {16, 1, 3, 3}},  {"fc.0.bias", {16}},
                                  {"fc.2.weight", {32, 16, 3, 3}}, {"fc.2.bias", {32}},
                                  {"fc.4.weight", {32, 32, 3, 3}}, {"fc.4.bias", {32}},
                                  {"fc.8.weight", {10, 32}},       {"fc.8.bias", {10}}};
  Task t{"fm16", ht::nowcast_spec_feedforward(shapes), {}};
  for (const auto& [n, s] : shapes) t.weights.push_back(torch::randn(s) * 0.1);
  return t;
}

// GFLOP/s of the models' core operation ([32768, 128] x [128, 128] float), measured just before
// each model: on a shared machine it shows how much of the CPU the figures next to it had.
double calibration_gflops() {
  const at::Tensor a = torch::randn({32768, 128}), b = torch::randn({128, 128});
  at::Tensor c = at::mm(a, b);
  const auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i) at::mm_out(c, a, b);
  return 20 * 2.0 * 32768 * 128 * 128 / seconds_since(t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 3;
  std::string models_dir = std::string(HT_SOURCE_DIR) + "/models/nino/";
  std::string dump_lpe, which = "tiny,6x256,fm16";
  CLI::App app{"Times one WNN+ / NiNo prediction"};
  app.add_option("--threads", threads);
  app.add_option("--repeats", repeats,
                 "timed predictions per model after a warmup (median reported); 0: one cold run");
  app.add_option("--models", models_dir, "folder with nino_mlp / nino_no_posw.safetensors");
  app.add_option("--tasks", which,
                 "comma list of tiny, 6x256, fm16, gpt2 (GPT-2 small: WNN+ only)");
  app.add_option("--dump-lpe", dump_lpe, "write each task's NiNo graph features to this folder");
  CLI11_PARSE(app, argc, argv);

  ht::install_tracking_allocator();
  ht::set_threads(threads);
  torch::manual_seed(0);
  std::printf("cpu: %s, threads %d\n", ht::cpu_model().c_str(), threads);
  std::vector<Task> tasks;
  for (std::string rest = which + ","; rest.find(',') != std::string::npos;) {
    const std::string t = rest.substr(0, rest.find(','));
    rest = rest.substr(rest.find(',') + 1);
    if (t == "tiny") tasks.push_back(gpt_task("gpt-tiny-4x128", 4, 4, 128));
    if (t == "6x256") tasks.push_back(gpt_task("gpt-6x256", 6, 8, 256));
    if (t == "fm16") tasks.push_back(fm16_task());
    if (t == "gpt2") tasks.push_back(gpt_task("gpt2-small", 12, 12, 768, 50257, 1024));
  }
  for (const auto& task : tasks) {
    // A trajectory drifting linearly with a little noise: the states' values do not change cost.
    std::vector<std::vector<at::Tensor>> states;
    std::vector<at::Tensor> out;
    int64_t params = 0;
    for (const auto& w : task.weights) {
      const at::Tensor v = torch::randn_like(w) * 1e-3;
      std::vector<at::Tensor> seq;
      for (int t = 0; t < ht::kNowcastContext; ++t) {
        seq.push_back(w + v * t + torch::randn_like(w) * 1e-4);
      }
      states.push_back(seq);
      out.push_back(torch::empty_like(w));
      params += w.numel();
    }
    for (const bool graph : {false, true}) {
      if (graph && params > 20'000'000) {  // edge states alone: 512 B per parameter
        std::printf("%-15s nino  skipped: its edge states alone would take %.0f GiB\n",
                    task.name.c_str(), params * 512.0 / (1 << 30));
        continue;
      }
      const double gflops = calibration_gflops();
      const int64_t before = ht::allocator_stats().current_bytes;
      ht::reset_peak_bytes();
      const auto t0 = Clock::now();
      auto model = graph ? ht::load_nino(models_dir + "nino_no_posw.safetensors", task.spec)
                         : ht::load_wnn_plus(models_dir + "nino_mlp.safetensors", task.spec);
      const double setup_s = seconds_since(t0);
      const int64_t setup_peak = ht::allocator_stats().peak_bytes - before;
      const int64_t resident = ht::allocator_stats().current_bytes - before;
      std::vector<double> times;
      int64_t peak = 0;
      // A warmup first, unless --repeats 0: then the single (cold) run is the figure.
      for (int r = 0; r < repeats + 1; ++r) {
        const int64_t base = ht::allocator_stats().current_bytes;
        ht::reset_peak_bytes();
        const auto t1 = Clock::now();
        model->predict(states, 40, out);
        if (r > 0 || repeats == 0) times.push_back(seconds_since(t1));
        peak = std::max(peak, ht::allocator_stats().peak_bytes - base);
      }
      std::sort(times.begin(), times.end());
      std::printf(
          "%-15s %-5s params %9lld  graph %7lld nodes %9lld edges  setup %7.2f s "
          "(peak %8.1f MiB, kept %7.1f MiB)  predict %7.3f s (median of %d)  "
          "workspace peak %8.1f MiB  [gemm %.0f GFLOP/s]\n",
          task.name.c_str(), model->name().c_str(), static_cast<long long>(params),
          static_cast<long long>(model->graph_nodes()),
          static_cast<long long>(model->graph_edges()), setup_s, mib(setup_peak), mib(resident),
          times[times.size() / 2], static_cast<int>(times.size()), mib(peak), gflops);
      std::fflush(stdout);
    }
    if (!dump_lpe.empty()) {
      const auto g = ht::describe_neural_graph(task.spec);
      ht::save_safetensors(
          dump_lpe + "/" + task.name + ".safetensors",
          {{"lpe", g.lpe}, {"degree", g.degree}, {"src", g.src}, {"dst", g.dst}},
          {{"nodes", std::to_string(g.nodes)}, {"eigen_nodes", std::to_string(g.eigen_nodes)}});
      std::printf("%-15s graph features written (%lld nodes, eigensolve on %lld)\n",
                  task.name.c_str(), static_cast<long long>(g.nodes),
                  static_cast<long long>(g.eigen_nodes));
    }
  }
  return 0;
}
