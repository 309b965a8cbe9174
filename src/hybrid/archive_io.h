// Small helpers to put scalars and tensor lists into torch::serialize archives and read them back
// into preallocated buffers (copy_, so buffers keep their storage, device and identity).
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace ht {
namespace archive_io {

void put(torch::serialize::OutputArchive& a, const std::string& key, double v);
void put(torch::serialize::OutputArchive& a, const std::string& key, int64_t v);
void put(torch::serialize::OutputArchive& a, const std::string& key, bool v);
void put(torch::serialize::OutputArchive& a, const std::string& key, const std::string& v);
void put(torch::serialize::OutputArchive& a, const std::string& key, const std::vector<double>& v);

double get_double(torch::serialize::InputArchive& a, const std::string& key);
int64_t get_int(torch::serialize::InputArchive& a, const std::string& key);
// For a key a later version added: archives written before it read as `absent`.
int64_t get_int_or(torch::serialize::InputArchive& a, const std::string& key, int64_t absent);
bool get_bool(torch::serialize::InputArchive& a, const std::string& key);
std::string get_string(torch::serialize::InputArchive& a, const std::string& key);
std::vector<double> get_doubles(torch::serialize::InputArchive& a, const std::string& key);

// Tensors as key_0, key_1, ... plus key_n. Reading copies into dst when dst already holds
// tensors of matching shapes (and throws naming the key otherwise); an empty dst gets fresh ones.
void put_tensors(torch::serialize::OutputArchive& a, const std::string& key,
                 const std::vector<at::Tensor>& tensors);
void get_tensors_into(torch::serialize::InputArchive& a, const std::string& key,
                      std::vector<at::Tensor>& dst);
// The same for tensors a later version added: false (dst untouched) where the archive has none.
bool get_tensors_into_if_present(torch::serialize::InputArchive& a, const std::string& key,
                                 std::vector<at::Tensor>& dst);

at::Tensor get_tensor(torch::serialize::InputArchive& a, const std::string& key);

}  // namespace archive_io
}  // namespace ht
