// The neural graphs of the repo's own models, built from their named parameters: the
// Fashion-MNIST MLP, the flattening CNN and the GPT (HF names, Conv1D weights, tied head).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "hybrid/hybrid/nowcast.h"
#include "hybrid/models/cnn.h"
#include "hybrid/models/gpt.h"
#include "hybrid/models/mlp.h"

TEST(NowcastRepoGraphs, MlpCnnAndGptBuild) {
  ht::MLP mlp;      // fc1/fc2/fc3, 784-512-256-10
  ht::ConvNet cnn;  // conv1/conv2/fc with a flatten of 32 x 7 x 7
  ht::GPTConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_embd = 32, c.vocab_size = 64, c.block_size = 16;
  ht::GPT gpt(c);
  const auto a = ht::describe_neural_graph(ht::nowcast_spec_feedforward(ht::named_shapes(mlp)));
  EXPECT_EQ(a.nodes, 784 + 1 + 512 + 1 + 256 + 1 + 10);
  EXPECT_EQ(a.edges, ht::count_parameters(mlp) + a.nodes);
  const auto b = ht::describe_neural_graph(ht::nowcast_spec_feedforward(ht::named_shapes(cnn)));
  EXPECT_EQ(b.nodes, 1 + 1 + 16 + 1 + 32 + 32 * 49 + 1 + 10);
  const auto s = ht::nowcast_spec_gpt2(ht::named_shapes(gpt), c.n_head);
  const auto g = ht::describe_neural_graph(s);
  // params as edges (c_attn once), + per block 2 x n_head x head_dim head edges, 2 x C residual
  // edges, + one self-loop per node.
  EXPECT_EQ(g.edges,
            ht::count_parameters(gpt) + c.n_layer * (2 * c.n_embd + 2 * c.n_embd) + g.nodes);
  EXPECT_EQ(at::isnan(g.lpe).sum().item<int64_t>(), 0);
}
