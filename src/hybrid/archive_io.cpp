// Scalars go in as IValues, lists of doubles and tensors as tensors; every read names its key on
// failure so a checkpoint from another configuration fails with a message, not a crash.
#include "archive_io.h"

#include <stdexcept>

namespace ht {
namespace archive_io {
namespace {

c10::IValue read_ivalue(torch::serialize::InputArchive& a, const std::string& key) {
  c10::IValue v;
  if (!a.try_read(key, v)) {
    throw std::runtime_error("step-strategy state: key '" + key +
                             "' missing from the archive (saved by another version or strategy?)");
  }
  return v;
}

}  // namespace

void put(torch::serialize::OutputArchive& a, const std::string& key, double v) { a.write(key, c10::IValue(v)); }
void put(torch::serialize::OutputArchive& a, const std::string& key, int64_t v) { a.write(key, c10::IValue(v)); }
void put(torch::serialize::OutputArchive& a, const std::string& key, bool v) { a.write(key, c10::IValue(v)); }
void put(torch::serialize::OutputArchive& a, const std::string& key, const std::string& v) {
  a.write(key, c10::IValue(v));
}
void put(torch::serialize::OutputArchive& a, const std::string& key, const std::vector<double>& v) {
  a.write(key, torch::tensor(v, torch::kDouble).reshape({static_cast<int64_t>(v.size())}), true);
}

double get_double(torch::serialize::InputArchive& a, const std::string& key) {
  return read_ivalue(a, key).toDouble();
}
int64_t get_int(torch::serialize::InputArchive& a, const std::string& key) {
  return read_ivalue(a, key).toInt();
}
int64_t get_int_or(torch::serialize::InputArchive& a, const std::string& key, int64_t absent) {
  c10::IValue v;
  return a.try_read(key, v) ? v.toInt() : absent;
}
bool get_bool(torch::serialize::InputArchive& a, const std::string& key) {
  return read_ivalue(a, key).toBool();
}
std::string get_string(torch::serialize::InputArchive& a, const std::string& key) {
  return read_ivalue(a, key).toStringRef();
}
std::vector<double> get_doubles(torch::serialize::InputArchive& a, const std::string& key) {
  at::Tensor t = get_tensor(a, key).to(torch::kDouble).contiguous();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

at::Tensor get_tensor(torch::serialize::InputArchive& a, const std::string& key) {
  at::Tensor t;
  if (!a.try_read(key, t, true)) {
    throw std::runtime_error("step-strategy state: tensor '" + key + "' missing from the archive");
  }
  return t;
}

void put_tensors(torch::serialize::OutputArchive& a, const std::string& key,
                 const std::vector<at::Tensor>& tensors) {
  put(a, key + "_n", static_cast<int64_t>(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) a.write(key + "_" + std::to_string(i), tensors[i], true);
}

void get_tensors_into(torch::serialize::InputArchive& a, const std::string& key,
                      std::vector<at::Tensor>& dst) {
  const int64_t n = get_int(a, key + "_n");
  torch::NoGradGuard no_grad;
  if (dst.empty()) {
    for (int64_t i = 0; i < n; ++i) dst.push_back(get_tensor(a, key + "_" + std::to_string(i)));
    return;
  }
  if (n != static_cast<int64_t>(dst.size())) {
    throw std::runtime_error("step-strategy state: '" + key + "' holds " + std::to_string(n) +
                             " tensors, this model has " + std::to_string(dst.size()));
  }
  for (int64_t i = 0; i < n; ++i) {
    const std::string k = key + "_" + std::to_string(i);
    at::Tensor t = get_tensor(a, k);
    if (t.sizes() != dst[i].sizes()) {
      throw std::runtime_error("step-strategy state: '" + k + "' has shape " + c10::str(t.sizes()) +
                               ", expected " + c10::str(dst[i].sizes()));
    }
    dst[i].copy_(t);
  }
}

bool get_tensors_into_if_present(torch::serialize::InputArchive& a, const std::string& key,
                                 std::vector<at::Tensor>& dst) {
  c10::IValue n;
  if (!a.try_read(key + "_n", n)) return false;
  get_tensors_into(a, key, dst);
  return true;
}

}  // namespace archive_io
}  // namespace ht
