// Laplacian positional features of a neural graph: NiNo's node inputs are eigenvectors 1..8 of the
// symmetric normalised Laplacian of the undirected graph, made canonical (sign and basis).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "neural_graph.h"

namespace ht::nowcast {

struct LaplacianFeatures {
  at::Tensor pe;            // [nodes, dim] float32
  at::Tensor degree;        // [nodes] int64, undirected, no self-loops
  int64_t eigen_nodes = 0;  // size of the dense eigenproblem that was solved
};

// Eigenvectors are defined up to sign, and up to rotation inside a repeated eigenvalue (neural
// graphs are full of them: every neuron of a layer is interchangeable). The reference draws
// random signs, so the model was trained not to depend on them; we pick one canonical basis:
// eigenvalues closer than 1e-6 form one eigenspace, whose basis is Gram-Schmidt on the
// projections of the unit vectors e_0, e_1, ... (rows under 1e-3 of the largest are skipped),
// each vector positive at the node that introduced it. It depends only on the eigenspaces.
//
// Solved exactly but small: "twin" nodes (same neighbours: the neurons of a hidden MLP layer,
// a head's query neurons, the vocabulary rows) are merged. Vectors that sum to zero over a twin
// class are eigenvectors of eigenvalue 1, and the rest of the spectrum is that of the quotient
// graph, solved densely (LAPACK, float64) over the classes. Throws NowcastError when the quotient
// has more than max_eigen_nodes nodes.
LaplacianFeatures laplacian_features(const NeuralGraph& graph, int64_t dim,
                                     int64_t max_eigen_nodes);

}  // namespace ht::nowcast
