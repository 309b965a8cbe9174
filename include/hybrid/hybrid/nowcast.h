// Weight nowcasting with pretrained models (NiNo, Knyazev et al. ICLR 2025; WNN+, after Jang et
// al. ICML 2023): from the last 5 states of every parameter, predict its weights k intervals ahead.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ht {

// NiNo's parameter (edge) types: the row of the models' 15-row type embedding each scalar uses.
enum class ParamKind : int {
  kPadding = 0,
  kLinear = 1,         // fully connected weight (torch Linear [out, in], GPT-2 Conv1D [in, out])
  kBias = 2,           // biases and any other 1-D parameter that is not a norm gain
  kConv = 3,           // conv kernel [out, in, kh, kw]
  kNorm = 4,           // LayerNorm / BatchNorm weight
  kWordEmbedding = 5,  // wte [vocab, C]
  kPositionEmbedding = 6,  // wpe [positions, C]
  kAttnQuery = 7,
  kAttnKey = 8,
  kAttnValue = 9,
  kResidual = 10,  // graph only: fixed identity edges (residuals, our CNN flatten)
  kAttnHead = 11,  // graph only: head node -> that head's q / v neurons
  kSelfLoop = 13,  // graph only
  // Not an edge type: GPT-2's fused input projection c_attn.weight [C, 3C]; its column thirds
  // are kAttnQuery | kAttnKey | kAttnValue.
  kAttnQKV = 100,
};

// How the neural graph wires the parameters: a chain of Linear/Conv2d layers (1-D parameters act
// on the outputs of the weight before them; a Linear after a conv may flatten [C, H, W]), or
// GPT-2 with Hugging Face names (optionally prefixed, e.g. "transformer.") and NiNo's per-head
// attention graph.
enum class NowcastFamily { kFeedForward, kGPT2 };

struct NowcastParam {
  std::string name;
  std::vector<int64_t> shape;
  ParamKind kind = ParamKind::kBias;
};

// A model-agnostic description of a model's parameters, in named_parameters() order.
struct NowcastSpec {
  NowcastFamily family = NowcastFamily::kFeedForward;
  int64_t n_head = 0;  // GPT-2: attention heads (names alone do not say)
  std::vector<NowcastParam> params;
};

// The parameters a jump moves, by kind: names joined by '+' (linear, conv, bias, norm, wte, wpe,
// attn = GPT-2's c_attn), or "all". The others stay where the optimizer left them: a nowcaster
// may predict some kinds well and others badly (measured per kind by `nowcast-meta scan --parts`).
class JumpKinds {
 public:
  JumpKinds() = default;  // all
  static JumpKinds parse(const std::string& text);  // NowcastError names the kinds it knows
  bool moves(ParamKind kind) const { return (mask_ >> kind_bit(kind)) & 1u; }
  bool all() const { return mask_ == kAll; }
  const std::string& text() const { return text_; }

 private:
  static int kind_bit(ParamKind kind);
  static constexpr uint32_t kAll = ~0u;
  uint32_t mask_ = kAll;
  std::string text_ = "all";
};

using NamedShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

NamedShapes named_shapes(const torch::nn::Module& module);  // named_parameters(), in order
// Kinds from shapes: 4-D conv, 2-D linear, 1-D ".weight" norm, other 1-D bias.
NowcastSpec nowcast_spec_feedforward(const NamedShapes& params);
// Kinds from GPT-2 names: wte, wpe, attn.c_attn.weight (q|k|v), 1-D norm/bias, others linear.
NowcastSpec nowcast_spec_gpt2(const NamedShapes& params, int64_t n_head);

// Every error of this module (bad spec, weights file, inputs): says what is wrong and the fix.
class NowcastError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr int kNowcastContext = 5;  // states per prediction, taken every period / 5 steps

struct NowcastOptions {
  // Rows (scalars for WNN+, edges for NiNo) processed at once: bounds the per-chunk workspace,
  // ~1.5 KB per row (~50 MiB at the default) whatever the model size. NiNo also keeps 512 B of
  // edge state per parameter for the whole prediction (nino.cpp says what else it keeps).
  int64_t chunk_rows = 1 << 15;
  // NiNo: the Laplacian eigensolve is dense (float64, O(n^3)) over the structurally distinct
  // nodes of the neural graph (twin neurons merged first): ~1.2k nodes for the tiny GPT (< 1 s),
  // ~3.5k for a 6 x 256 GPT (~30 s on 2 cores, once per model). Larger graphs are refused.
  int64_t max_eigen_nodes = 8192;
  // Where WNN+ computes (its normalisation and its MLP over every scalar). States and outputs
  // stay float32 host tensors either way; on a GPU each tensor's 5 states go over and its
  // prediction comes back, so it holds 5 copies of the largest tensor there for the jump. The
  // nowcast engine sets it to the device that trains. NiNo computes on the host regardless.
  c10::Device device = c10::kCPU;
};

class NowcastModel {
 public:
  virtual ~NowcastModel() = default;
  virtual std::string name() const = 0;     // "wnn+" or "nino"
  virtual int64_t max_horizon() const = 0;  // 40 for the released models
  const NowcastSpec& spec() const { return spec_; }

  // states[i]: parameter i's last kNowcastContext states, oldest first (states[i][4] is the current
  // weights), float32 CPU tensors shaped like spec().params[i]. k in 1..max_horizon(): how many
  // recording intervals ahead. Writes the prediction into out[i] (contiguous float32, same shape;
  // it may be states[i][4] itself, so the weights can be jumped in place). Runs without autograd.
  void predict(const std::vector<std::vector<at::Tensor>>& states, int64_t k,
               const std::vector<at::Tensor>& out);
  // Same, into new tensors.
  std::vector<at::Tensor> predict(const std::vector<std::vector<at::Tensor>>& states, int64_t k);

  // Size of the neural graph NiNo runs on (0 for WNN+, which needs none).
  virtual int64_t graph_nodes() const { return 0; }
  virtual int64_t graph_edges() const { return 0; }

 protected:
  explicit NowcastModel(NowcastSpec spec) : spec_(std::move(spec)) {}
  virtual void predict_checked(const std::vector<std::vector<at::Tensor>>& states, int64_t k,
                               const std::vector<at::Tensor>& out) = 0;

 private:
  NowcastSpec spec_;
};

// WNN+ (models/nino/nino_mlp.safetensors): a per-scalar MLP with the parameter-kind embedding.
std::unique_ptr<NowcastModel> load_wnn_plus(const std::string& path, NowcastSpec spec,
                                            NowcastOptions options = {});
// NiNo GNN (models/nino/nino_no_posw.safetensors). Builds and keeps the neural graph and its
// Laplacian features for this spec once; each prediction runs the message passing.
std::unique_ptr<NowcastModel> load_nino(const std::string& path, NowcastSpec spec,
                                        NowcastOptions options = {});

// The neural graph NiNo builds for a spec, for inspection and tests.
struct NeuralGraphInfo {
  int64_t nodes = 0;
  int64_t edges = 0;        // self-loops included
  int64_t eigen_nodes = 0;  // structurally distinct nodes the eigensolve ran on
  at::Tensor src, dst;      // [edges] int64: parameter edges point from inputs to outputs
  at::Tensor edge_type;     // [edges] int64, ParamKind values
  at::Tensor degree;        // [nodes] int64: neighbours in the undirected graph, no self-loops
  at::Tensor lpe;           // [nodes, 8] float32: canonical Laplacian eigenvectors 1..8
};
NeuralGraphInfo describe_neural_graph(const NowcastSpec& spec, NowcastOptions options = {});

}  // namespace ht
