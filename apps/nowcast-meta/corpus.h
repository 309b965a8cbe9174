// The trajectory corpus of nowcast-meta: training runs of this project (MLPs and CNNs on
// Fashion-MNIST, byte-level GPTs on Debian's license texts) unlike the benchmark tasks, recorded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hybrid/hybrid/nowcast_meta.h"

namespace ht::meta {

struct CorpusTask {
  std::string family;            // "mlp", "cnn", "gpt", "gpt-words"; for measuring only: "fm16", "gpt-{tiny,wide}-kjv"
  std::vector<int64_t> widths;   // mlp: hidden widths; cnn: channels1, channels2; gpt*: layers, width, heads
  int64_t batch = 128;
  int64_t context = 64;          // gpt* only
  std::string tokens_path;       // gpt-words only: the token file and its vocabulary (CorpusScale's)
  int64_t vocab = 0;
  double lr = 1e-3;
  double beta2 = 0.999;
  double weight_decay = 0.0;
  bool cosine = false;           // warmup (5 % of the run) + cosine, else constant
  std::string optimizer = "adamw";  // or "muon" (bf16 iterations; GPTs and the benchmark tasks only)
  int64_t seed = 1;
  int64_t interval = 100;        // steps between recorded states
  int64_t states = 60;           // recorded states (after interval, 2 x interval, ... steps)
  std::string describe() const;  // one line: family, shape, lr, schedule, seed, interval
  int64_t steps() const { return interval * states; }
};

// A benchmark task of record under NiNo's protocol (constant AdamW rate), for `scan` to measure
// what jumps are worth there - never for a corpus: "fm16" (NiNo's FM-16: 16/32/32 CNN, batch 128,
// 6e-3, no weight decay), "gpt-tiny-kjv" (4 x 128 GPT on KJV, batch 16, context 128, 3e-3),
// "gpt-wide-kjv" (the same at 6 x 256, 8 heads: hybrid_bench's gpt-wide) or "gpt-words-kjv"
// (record_v2's word-level GPT: 3 x 64 on tokens_path, a word_tokens.py file of vocab ids, batch 16,
// context 64, 2e-3, wd 0.01). A state every 200 steps (the benchmarks' period of 1000); optimizer
// "adamw" or "muon". Throws OptionsError for other names or optimizers, or a token file whose ids
// reach vocab.
CorpusTask benchmark_task(const std::string& name, int64_t seed, int64_t states, const std::string& optimizer,
                          const std::string& tokens_path = "", int64_t vocab = 0);

struct CorpusScale {
  int64_t runs = 48;          // cycles through `families`
  std::vector<std::string> families = {"mlp", "cnn", "gpt"};
  // "small": 1-3 layers of width 32-64, context 32/64 (the default corpus). "medium": 2-5 layers of
  // width 96-160, context 128, the tiny GPT benchmark's batch and scale (not its 4 x 128 shape).
  std::string gpt_size = "small";
  int64_t states = 60;        // per run
  int64_t max_scalars = 1024; // recorded scalars per tensor
  double interval_scale = 1.0;  // multiplies each family's intervals (quick presets: < 1)
  uint64_t seed = 2024;
  // "adamw", or "muon": the trajectories of Muon (bf16 iterations, the benchmarks' setting), which
  // orthogonalizes the matrices' steps - GPT families only (the MLP/CNN runs build their own AdamW).
  std::string optimizer = "adamw";
  // "gpt-words": GPTs on word-level tokens (bench/python/word_tokens.py's uint16 file of another text
  // than KJV, e.g. Debian's fortunes) at AdamW's tuned rates there - the runs a nowcaster for the
  // word-level KJV GPT should have seen. The file and its vocabulary (its ids < tokens_vocab).
  std::string tokens_path;
  int64_t tokens_vocab = 8192;
};

// The runs of a corpus: shapes, rates, schedules and seeds drawn (seeded) from lists that leave
// out the benchmark tasks (784-512-256-10, the 16/32 CNN, FM-16, the 4 x 128 and 6 x 256 GPTs,
// KJV, the word-level 3 x 64 GPT). Throws OptionsError for an unknown family or GPT size, or
// gpt-words without a token file.
std::vector<CorpusTask> corpus_tasks(const CorpusScale& scale);

// Writes /usr/share/common-licenses/* (Debian base-files) concatenated into `path` (the GPTs' text).
void write_license_text(const std::string& path);

// Trains one task at the current thread count and records it. text_path: write_license_text's file
// (gpt-words tasks read their own tokens_path instead).
Trajectory record_task(const CorpusTask& task, int64_t max_scalars, const std::string& fashion_mnist_dir,
                       const std::string& text_path);

}  // namespace ht::meta
