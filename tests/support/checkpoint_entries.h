// A checkpoint as a flat list of entries ("model/h.0.attn.c_attn.weight", "strategy/phase_ms"),
// so tests can compare two checkpoints entry by entry: tensors bit for bit, scalars exactly.
#pragma once

#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hybrid/core/checkpoint_file.h"

namespace ht::testing {

using CheckpointEntries = std::map<std::string, c10::IValue>;

namespace detail {
inline void flatten(torch::serialize::InputArchive& archive, const std::string& prefix, CheckpointEntries& out) {
  for (const std::string& key : archive.keys()) {
    if (key == "training") continue;  // every module archive has it; not a checkpoint entry
    const std::string name = prefix.empty() ? key : prefix + "/" + key;
    c10::IValue value;
    if (!archive.try_read(key, value)) continue;
    if (value.isObject()) {
      torch::serialize::InputArchive sub;
      if (archive.try_read(key, sub)) flatten(sub, name, out);
      continue;
    }
    out[name] = value;
  }
}
}  // namespace detail

inline CheckpointEntries checkpoint_entries(const std::string& path) {
  const std::string payload = read_checkpoint_file(path);
  torch::serialize::InputArchive root;
  root.load_from(payload.data(), payload.size());
  CheckpointEntries out;
  detail::flatten(root, "", out);
  return out;
}

// Bit-for-bit: tensors of the same dtype and shape with equal bytes, doubles with equal bits.
inline bool same_entry(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    const at::Tensor x = a.toTensor().contiguous(), y = b.toTensor().contiguous();
    return x.scalar_type() == y.scalar_type() && x.sizes() == y.sizes() &&
           std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
  }
  if (a.isDouble() && b.isDouble()) {
    const double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (a.isInt() && b.isInt()) return a.toInt() == b.toInt();
  if (a.isBool() && b.isBool()) return a.toBool() == b.toBool();
  if (a.isString() && b.isString()) return a.toStringRef() == b.toStringRef();
  std::ostringstream x, y;
  x << a;
  y << b;
  return a.tagKind() == b.tagKind() && x.str() == y.str();
}

// The names of entries that differ or exist on one side only; `ignore` names entries not compared.
inline std::vector<std::string> differing_entries(const CheckpointEntries& a, const CheckpointEntries& b,
                                                  const std::set<std::string>& ignore = {}) {
  std::vector<std::string> out;
  for (const auto& [name, value] : a) {
    if (ignore.count(name)) continue;
    const auto it = b.find(name);
    if (it == b.end()) out.push_back(name + " (only in the first)");
    else if (!same_entry(value, it->second)) out.push_back(name);
  }
  for (const auto& [name, value] : b)
    if (!ignore.count(name) && !a.count(name)) out.push_back(name + " (only in the second)");
  return out;
}

// The stored config with the lines that name where a run wrote (run.out_dir) removed: two runs in
// different directories store different text for the same training.
inline std::string config_without_out_dir(const std::string& toml) {
  std::istringstream in(toml);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("out_dir = ", 0) != 0) out += line + "\n";
  return out;
}

}  // namespace ht::testing
