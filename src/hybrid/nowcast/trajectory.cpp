// Recording parameter trajectories for meta-training (a random subset of scalars per tensor plus
// whole-tensor sums), and the corpus file: one safetensors file, task names in its metadata.
#include <algorithm>
#include <numeric>
#include <random>

#include <ATen/ATen.h>

#include "hybrid/core/safetensors.h"
#include "hybrid/hybrid/nowcast_meta.h"

namespace ht {

TrajectoryRecorder::TrajectoryRecorder(const NowcastSpec& spec, int64_t max_scalars, uint64_t seed) : spec_(spec) {
  if (max_scalars < 1) throw NowcastError("TrajectoryRecorder: max_scalars must be >= 1");
  std::mt19937_64 rng(seed);
  for (const auto& p : spec_.params) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    if (n > max_scalars) {  // a partial Fisher-Yates shuffle: the first max_scalars are the sample
      for (int64_t i = 0; i < max_scalars; ++i) {
        std::uniform_int_distribution<int64_t> pick(i, n - 1);
        std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(pick(rng))]);
      }
      all.resize(static_cast<size_t>(max_scalars));
      std::sort(all.begin(), all.end());
    }
    const at::Tensor idx = at::tensor(all, at::kLong);
    at::Tensor kinds;
    if (p.kind == ParamKind::kAttnQKV) {  // [C, 3C]: columns [0, C) query, [C, 2C) key, [2C, 3C) value
      const int64_t width = p.shape.at(1);
      kinds = at::div(at::remainder(idx, width), width / 3, "floor") + static_cast<int>(ParamKind::kAttnQuery);
    } else {
      const int kind = static_cast<int>(p.kind);
      if (kind < 1 || kind > 9) throw NowcastError("TrajectoryRecorder: '" + p.name + "' has kind " +
                                                   std::to_string(kind) + "; WNN+ takes kinds 1-9 or kAttnQKV");
      kinds = at::full({idx.size(0)}, kind, at::kLong);
    }
    numel_.push_back(n);
    index_.push_back(idx);
    kinds_.push_back(kinds);
  }
  values_.resize(spec_.params.size());
  sum_.resize(spec_.params.size());
  sumsq_.resize(spec_.params.size());
}

void TrajectoryRecorder::record(const std::vector<at::Tensor>& params) {
  if (params.size() != spec_.params.size())
    throw NowcastError("TrajectoryRecorder::record: got " + std::to_string(params.size()) + " tensors, the spec has " +
                       std::to_string(spec_.params.size()));
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor flat = params[i].detach().to(at::kCPU, at::kFloat).reshape(-1);
    if (flat.numel() != numel_[i])
      throw NowcastError("TrajectoryRecorder::record: '" + spec_.params[i].name + "' has " +
                         std::to_string(flat.numel()) + " values, its spec " + std::to_string(numel_[i]));
    const at::Tensor d = flat.to(at::kDouble);
    sum_[i].push_back(d.sum().item<double>());
    sumsq_[i].push_back(at::dot(d, d).item<double>());
    values_[i].push_back(flat.index_select(0, index_[i]).clone());
  }
  ++states_;
}

Trajectory TrajectoryRecorder::take(const std::string& task, int64_t interval) {
  Trajectory t;
  t.task = task;
  t.interval = interval;
  for (size_t i = 0; i < spec_.params.size(); ++i) {
    TrajectoryTensor tt;
    tt.name = spec_.params[i].name;
    tt.numel = numel_[i];
    tt.kinds = kinds_[i];
    tt.values = values_[i].empty() ? at::empty({0, index_[i].size(0)}, at::kFloat) : at::stack(values_[i]);
    tt.sum = std::move(sum_[i]);
    tt.sumsq = std::move(sumsq_[i]);
    values_[i].clear();
    sum_[i].clear();
    sumsq_[i].clear();
    t.tensors.push_back(std::move(tt));
  }
  states_ = 0;
  return t;
}

// File layout: "<j>/<i>/values" [T, M] F32, "<j>/<i>/kinds" [M] I64, "<j>/<i>/sums" [T, 2] F64
// (sum, sum of squares), "<j>/<i>/numel" [1] I64; metadata "trajectories", "<j>/task",
// "<j>/interval", "<j>/tensors", "<j>/<i>/name".
void save_trajectories(const std::string& path, const std::vector<Trajectory>& corpus) {
  NamedTensors tensors;
  std::map<std::string, std::string> meta;
  meta["trajectories"] = std::to_string(corpus.size());
  for (size_t j = 0; j < corpus.size(); ++j) {
    const Trajectory& t = corpus[j];
    const std::string pj = std::to_string(j) + "/";
    meta[pj + "task"] = t.task;
    meta[pj + "interval"] = std::to_string(t.interval);
    meta[pj + "tensors"] = std::to_string(t.tensors.size());
    for (size_t i = 0; i < t.tensors.size(); ++i) {
      const TrajectoryTensor& tt = t.tensors[i];
      const std::string p = pj + std::to_string(i) + "/";
      meta[p + "name"] = tt.name;
      std::vector<double> sums;
      for (size_t s = 0; s < tt.sum.size(); ++s) sums.insert(sums.end(), {tt.sum[s], tt.sumsq[s]});
      tensors.emplace_back(p + "values", tt.values.contiguous());
      tensors.emplace_back(p + "kinds", tt.kinds.contiguous());
      tensors.emplace_back(p + "sums", at::tensor(sums, at::kDouble).reshape({-1, 2}));
      tensors.emplace_back(p + "numel", at::tensor(std::vector<int64_t>{tt.numel}, at::kLong));
    }
  }
  save_safetensors(path, tensors, meta);
}

std::vector<Trajectory> load_trajectories(const std::string& path) {
  std::map<std::string, std::string> meta;
  std::map<std::string, at::Tensor> tensors;
  try {
    tensors = load_safetensors(path, &meta);
  } catch (const SafetensorsError& e) {
    throw NowcastError(std::string("trajectory corpus: ") + e.what());
  }
  auto need = [&](const std::string& key) -> const std::string& {
    const auto it = meta.find(key);
    if (it == meta.end())
      throw NowcastError("trajectory corpus '" + path + "': metadata '" + key +
                         "' is missing; write the file with save_trajectories");
    return it->second;
  };
  auto tensor = [&](const std::string& key) -> const at::Tensor& {
    const auto it = tensors.find(key);
    if (it == tensors.end()) throw NowcastError("trajectory corpus '" + path + "': tensor '" + key + "' is missing");
    return it->second;
  };
  std::vector<Trajectory> corpus(std::stoul(need("trajectories")));
  for (size_t j = 0; j < corpus.size(); ++j) {
    const std::string pj = std::to_string(j) + "/";
    Trajectory& t = corpus[j];
    t.task = need(pj + "task");
    t.interval = std::stoll(need(pj + "interval"));
    const size_t n = std::stoul(need(pj + "tensors"));
    for (size_t i = 0; i < n; ++i) {
      const std::string p = pj + std::to_string(i) + "/";
      TrajectoryTensor tt;
      tt.name = need(p + "name");
      tt.values = tensor(p + "values");
      tt.kinds = tensor(p + "kinds");
      tt.numel = tensor(p + "numel").item<int64_t>();
      const at::Tensor sums = tensor(p + "sums");
      if (tt.values.dim() != 2 || tt.kinds.dim() != 1 || tt.kinds.size(0) != tt.values.size(1) || sums.dim() != 2 ||
          sums.size(0) != tt.values.size(0) || sums.size(1) != 2)
        throw NowcastError("trajectory corpus '" + path + "': tensors of '" + p + "' have inconsistent shapes");
      for (int64_t s = 0; s < sums.size(0); ++s) {
        tt.sum.push_back(sums[s][0].item<double>());
        tt.sumsq.push_back(sums[s][1].item<double>());
      }
      t.tensors.push_back(std::move(tt));
    }
  }
  return corpus;
}

}  // namespace ht
