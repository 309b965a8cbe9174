// The neural graph NiNo runs on, as blocks of edges: nodes are neurons (plus one node per bias or
// norm vector, per attention head, per embedding row), every parameter scalar is an edge.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hybrid/hybrid/nowcast.h"

namespace ht::nowcast {

// The edges from a range of `rows` nodes to a range of `cols` nodes, listed row-major: either
// every row to every column (group == 0; a weight matrix), or row i to columns i*group ..
// i*group + group - 1 (group >= 1; identity connections, flatten). `reversed` flips their
// direction (NiNo points key weights from the query neurons back to the stream).
struct EdgeBlock {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  int64_t group = 0;
  bool reversed = false;
  int64_t type = 0;  // ParamKind value
  // A parameter's scalars: edge (i, o) carries element elem0 + i*stride_row + o*stride_col
  // (+ f for f < kernel: a conv kernel's values are one edge's features) of spec.params[param].
  int64_t param = -1;
  int64_t elem0 = 0, stride_row = 0, stride_col = 0, kernel = 1;
  // Otherwise a fixed feature: 1 for residual / head edges, 2 for self-loops (NiNo's values).
  int64_t value = 0;

  int64_t count() const { return group == 0 ? rows * cols : cols; }
};

struct NeuralGraph {
  int64_t nodes = 0;
  int64_t edges = 0;
  int64_t features = 1;           // per edge: the largest conv kernel (9 for 3x3), else 1
  std::vector<EdgeBlock> blocks;  // in edge order; the self-loops come last
};

// Throws NowcastError naming the parameter and the fix when the spec does not fit its family.
NeuralGraph build_neural_graph(const NowcastSpec& spec);

// Edge endpoints and types, [edges] int64 each.
struct EdgeTensors {
  at::Tensor src, dst, type;
};
EdgeTensors edge_tensors(const NeuralGraph& graph);

// For every edge and feature, the row of the normalised-state table it reads ([edges, features]
// int64): rows [0, P) are the parameters' elements at param_offsets, row P holds zeros (padding),
// P + 1 ones and P + 2 twos (the fixed features).
at::Tensor feature_rows(const NeuralGraph& graph, const std::vector<int64_t>& param_offsets,
                        int64_t total_params);

}  // namespace ht::nowcast
