// Canonical Laplacian eigenvectors of a neural graph, through its twin-class quotient: exact, and
// small enough for a dense eigensolver on every model NiNo can run on.
#include "laplacian.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace ht::nowcast {
namespace {

constexpr double kClusterTol = 1e-6;  // eigenvalues closer than this: one eigenspace
constexpr double kPivotTol = 1e-3;    // rows below this fraction of the largest never pivot

using Interval = std::pair<int64_t, int64_t>;  // nodes [first, second)

// Every node's neighbour set in the undirected graph without self-loops, as sorted, merged
// intervals: an exact representation, so equal lists mean twins.
std::vector<std::vector<Interval>> neighbour_intervals(const NeuralGraph& g) {
  std::vector<std::vector<Interval>> nbr(g.nodes);
  for (const auto& b : g.blocks) {
    if (b.type == static_cast<int64_t>(ParamKind::kSelfLoop)) continue;
    if (b.group == 0) {
      for (int64_t i = 0; i < b.rows; ++i) nbr[b.row0 + i].push_back({b.col0, b.col0 + b.cols});
      for (int64_t o = 0; o < b.cols; ++o) nbr[b.col0 + o].push_back({b.row0, b.row0 + b.rows});
    } else {
      for (int64_t i = 0; i < b.rows; ++i) {
        nbr[b.row0 + i].push_back({b.col0 + i * b.group, b.col0 + (i + 1) * b.group});
      }
      for (int64_t o = 0; o < b.cols; ++o) {
        const int64_t r = b.row0 + o / b.group;
        nbr[b.col0 + o].push_back({r, r + 1});
      }
    }
  }
  for (int64_t v = 0; v < g.nodes; ++v) {
    auto& list = nbr[v];
    std::sort(list.begin(), list.end());
    std::vector<Interval> merged;
    for (const auto& iv : list) {
      if (!merged.empty() && iv.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, iv.second);
      } else {
        merged.push_back(iv);
      }
    }
    for (const auto& iv : merged) {
      if (iv.first <= v && v < iv.second) {
        throw NowcastError("nowcast graph: internal error, node " + std::to_string(v) +
                           " is its own neighbour");
      }
    }
    list = std::move(merged);
  }
  return nbr;
}

struct Quotient {
  std::vector<int64_t> cls;                   // [nodes] class of each node
  std::vector<std::vector<int64_t>> members;  // per class, in node order
  std::vector<int64_t> degree;                // [nodes]
};

Quotient twin_classes(const std::vector<std::vector<Interval>>& nbr) {
  Quotient q;
  const int64_t n = static_cast<int64_t>(nbr.size());
  q.cls.resize(n);
  q.degree.resize(n);
  std::map<std::vector<Interval>, int64_t> ids;
  for (int64_t v = 0; v < n; ++v) {
    int64_t deg = 0;
    for (const auto& iv : nbr[v]) deg += iv.second - iv.first;
    q.degree[v] = deg;
    auto [it, inserted] = ids.emplace(nbr[v], static_cast<int64_t>(q.members.size()));
    if (inserted) q.members.emplace_back();
    q.cls[v] = it->second;
    q.members[it->second].push_back(v);
  }
  return q;
}

// Canonical orthonormal basis (first `count` vectors) of the eigenspace spanned by the lifted
// quotient eigenvectors `lifted` [N, c] plus, when `twin_space`, every vector summing to zero over
// each twin class. P e_v is formed directly; Gram-Schmidt in node order.
std::vector<at::Tensor> canonical_basis(const at::Tensor& lifted, bool twin_space,
                                        const Quotient& q, const at::Tensor& inv_size_per_node,
                                        int64_t count) {
  const int64_t n = lifted.size(0);
  at::Tensor diag =
      lifted.size(1) > 0 ? lifted.pow(2).sum(1) : at::zeros({n}, lifted.options());  // P_vv [N]
  if (twin_space) diag = diag + (1.0 - inv_size_per_node);
  const at::Tensor row_norm = diag.clamp_min(0).sqrt();
  const double thr = kPivotTol * row_norm.max().item<double>();
  const auto rn = row_norm.accessor<double, 1>();
  std::vector<at::Tensor> basis;
  for (int64_t v = 0; v < n && static_cast<int64_t>(basis.size()) < count; ++v) {
    if (rn[v] <= thr) continue;
    at::Tensor g =
        lifted.size(1) > 0 ? at::mv(lifted, lifted[v]) : at::zeros({n}, lifted.options());
    if (twin_space) {  // (I - class averaging) e_v
      const auto& mem = q.members[q.cls[v]];
      const double inv = 1.0 / static_cast<double>(mem.size());
      auto ga = g.accessor<double, 1>();
      for (int64_t u : mem) ga[u] -= inv;
      ga[v] += 1.0;
    }
    for (int pass = 0; pass < 2; ++pass) {  // twice is enough (Kahan)
      for (const auto& b : basis) g -= at::dot(b, g) * b;
    }
    const double norm = g.norm().item<double>();
    if (norm > thr) basis.push_back(g / norm);
  }
  if (static_cast<int64_t>(basis.size()) < count) {
    throw NowcastError("nowcast graph: internal error, eigenspace basis incomplete");
  }
  return basis;
}

}  // namespace

LaplacianFeatures laplacian_features(const NeuralGraph& graph, int64_t dim,
                                     int64_t max_eigen_nodes) {
  const auto nbr = neighbour_intervals(graph);
  const Quotient q = twin_classes(nbr);
  const int64_t n = graph.nodes;
  const int64_t m = static_cast<int64_t>(q.members.size());
  if (m > max_eigen_nodes) {
    throw NowcastError("nowcast: NiNo's neural graph for this model has " + std::to_string(m) +
                       " structurally distinct nodes; the dense eigensolve for its Laplacian "
                       "features would take ~" +
                       std::to_string(m * m * 8 / (1 << 20)) +
                       " MiB and O(n^3) time. Raise NowcastOptions::max_eigen_nodes (now " +
                       std::to_string(max_eigen_nodes) + ") or use WNN+ (load_wnn_plus)");
  }
  const auto f64 = at::TensorOptions().dtype(at::kDouble);

  // Quotient operator in the orthonormal basis 1_T / sqrt|T|: classes T, T' are either fully
  // adjacent or not at all (twins share neighbours), entry sqrt(|T||T'| / (d_T d_T')).
  at::Tensor s = at::zeros({m, m}, f64);
  auto sa = s.accessor<double, 2>();
  for (int64_t t = 0; t < m; ++t) {
    const int64_t v = q.members[t].front();
    const double st = static_cast<double>(q.members[t].size()), dt = q.degree[v];
    int64_t last = -1;
    for (const auto& iv : nbr[v]) {
      for (int64_t u = iv.first; u < iv.second; ++u) {
        const int64_t t2 = q.cls[u];
        if (t2 == last) continue;
        last = t2;
        const double st2 = static_cast<double>(q.members[t2].size());
        sa[t][t2] = std::sqrt(st * st2 / (dt * static_cast<double>(q.degree[u])));
      }
    }
  }
  auto [mu, y] = at::linalg_eigh(at::eye(m, f64) - s);  // ascending; columns orthonormal
  s = at::Tensor();

  // The whole spectrum: the quotient's eigenvalues plus 1 for the N - m twin differences.
  struct Item {
    double value;
    int64_t j;  // quotient eigenvector, or -1 for the twin-difference space
  };
  std::vector<Item> items;
  const auto mua = mu.accessor<double, 1>();
  for (int64_t j = 0; j < m; ++j) items.push_back({mua[j], j});
  if (n > m) items.push_back({1.0, -1});
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.value < b.value; });

  at::Tensor cls = at::empty({n}, at::TensorOptions().dtype(at::kLong));
  at::Tensor inv_size = at::empty({n}, f64);
  {
    auto ca = cls.accessor<int64_t, 1>();
    auto ia = inv_size.accessor<double, 1>();
    for (int64_t v = 0; v < n; ++v) {
      ca[v] = q.cls[v];
      ia[v] = 1.0 / static_cast<double>(q.members[q.cls[v]].size());
    }
  }
  const at::Tensor lift_scale = inv_size.sqrt().unsqueeze(1);  // [N, 1]

  const int64_t want = dim + 1;  // the trivial eigenvector comes first and is dropped
  std::vector<at::Tensor> vecs;
  for (size_t i = 0; i < items.size() && static_cast<int64_t>(vecs.size()) < want;) {
    size_t j = i;
    while (j + 1 < items.size() && items[j + 1].value - items[j].value <= kClusterTol) ++j;
    std::vector<int64_t> cols;
    bool twin_space = false;
    int64_t multiplicity = 0;
    for (size_t c = i; c <= j; ++c) {
      if (items[c].j < 0) {
        twin_space = true;
        multiplicity += n - m;
      } else {
        cols.push_back(items[c].j);
        multiplicity += 1;
      }
    }
    const at::Tensor idx = at::tensor(cols, at::TensorOptions().dtype(at::kLong));
    const at::Tensor lifted = y.index_select(1, idx).index_select(0, cls) * lift_scale;  // [N, c]
    const int64_t count = std::min(multiplicity, want - static_cast<int64_t>(vecs.size()));
    for (auto& v : canonical_basis(lifted, twin_space, q, inv_size, count)) vecs.push_back(v);
    i = j + 1;
  }

  LaplacianFeatures out;
  at::Tensor pe = at::zeros({n, dim}, f64);
  for (int64_t c = 1; c < static_cast<int64_t>(vecs.size()); ++c)
    pe.select(1, c - 1).copy_(vecs[c]);
  out.pe = pe.to(at::kFloat);
  out.degree = at::tensor(q.degree, at::TensorOptions().dtype(at::kLong));
  out.eigen_nodes = m;
  return out;
}

}  // namespace ht::nowcast
